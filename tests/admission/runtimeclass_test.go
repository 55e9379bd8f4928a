package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
)

var classesGVR = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPoolClasses}

func classObject(t *testing.T, name, runtimeClass string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	y := `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPoolClass
metadata: {name: "` + name + `"}
spec:
  selector: {matchLabels: {pool: "` + name + `"}}
  resourcePolicy: {resources: {cpu: "1", memory: 1Gi}}
  placeholderPod: {runtimeClassName: "` + runtimeClass + `"}
`
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestRuntimeClassChecked: a class (and a pool) whose placeholder pods would run on a
// RuntimeClass that does not exist, or whose handler is not the placeholder runtime's, is
// refused at admission with a message naming the field, as the webhook reads the cluster's
// RuntimeClasses through its informer; one with the placeholder handler is admitted, and so
// is a class edit that leaves a RuntimeClass deleted since in place.
func TestRuntimeClassChecked(t *testing.T) {
	cp := requireCluster(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cp.Config)
	for name, handler := range map[string]string{"rc-fast": v1alpha1.PlaceholderRuntimeHandler, "rc-runc": "runc"} {
		if _, err := kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.NodeV1().RuntimeClasses().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	classes := admin(t).Resource(classesGVR)
	create := func(name, rc string) error {
		_, err := classes.Create(ctx, classObject(t, name, rc), metav1.CreateOptions{})
		if err == nil {
			t.Cleanup(func() { _ = classes.Delete(ctx, name, metav1.DeleteOptions{}) })
		}
		return err
	}
	// The informer may not have the new RuntimeClasses yet.
	support.Eventually(t, "a class on the new RuntimeClass with the placeholder handler admitted", 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		err := create("rc-good", "rc-fast")
		return err == nil, fmt.Sprint(err)
	})
	wantForbidden(t, "a class on a RuntimeClass that does not exist", create("rc-typo", "probe-missing"),
		`spec.placeholderPod.runtimeClassName: RuntimeClass "probe-missing" does not exist`)
	wantForbidden(t, "a class on a RuntimeClass of another handler", create("rc-other", "rc-runc"),
		`spec.placeholderPod.runtimeClassName: RuntimeClass "rc-runc" runs handler "runc", not the placeholder runtime's "placeholder"`)
	pool := poolObject(t, poolName("node-rc"), "node-rc", "c1", "")
	if err := unstructured.SetNestedField(pool.Object, "probe-missing", "spec", "placeholderPod", "runtimeClassName"); err != nil {
		t.Fatal(err)
	}
	_, err := admin(t).Resource(poolsGVR).Create(ctx, pool, metav1.CreateOptions{})
	wantForbidden(t, "a pool on a RuntimeClass that does not exist", err, `spec.placeholderPod.runtimeClassName: RuntimeClass "probe-missing" does not exist`)

	// A RuntimeClass deleted after the class: the class's other edits still go through, a
	// change back to it does not.
	if err := kube.NodeV1().RuntimeClasses().Delete(ctx, "rc-fast", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	support.Eventually(t, "the webhook sees the RuntimeClass gone", 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		err := create("rc-late", "rc-fast")
		return apierrors.IsForbidden(err), fmt.Sprint(err)
	})
	if _, err := classes.Patch(ctx, "rc-good", "application/merge-patch+json", []byte(`{"spec":{"resourcePolicy":{"resources":{"cpu":"2"}}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("resizing a class whose RuntimeClass was deleted since: %v", err)
	}
}
