package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// TestServerSideDefaultsMatchCUE applies every example with kubectl and checks that the
// API server defaulted the spec exactly as the CUE schema does.
func TestServerSideDefaultsMatchCUE(t *testing.T) {
	requireCluster(t)
	s := schema.MustCompiled()
	examples, err := corpus.Examples()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range examples {
		t.Run(o.Name, func(t *testing.T) {
			file := filepath.Join(cp.Root, "examples", o.Name)
			kubectl(t, "", "apply", "-f", file)
			t.Cleanup(func() { _, _, _ = kubectlErr(t, "", "delete", "--wait=false", "-f", file) })
			out := kubectl(t, "", "get", "-f", file, "-o", "json")
			var served, want map[string]any
			if err := json.Unmarshal([]byte(out), &served); err != nil {
				t.Fatal(err)
			}
			defaulted, err := s.Default(schema.Kind(o.Kind), o.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(defaulted, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(served["spec"], want["spec"]) {
				t.Errorf("API server and CUE default differently:\nserver: %s\ncue:    %s",
					toJSON(t, served["spec"]), toJSON(t, want["spec"]))
			}
		})
	}
	// A pool with no placeholderPod and an empty override gets both defaults.
	u := fromYAML(t, poolYAML("defaults-node", "c")+"  override: {}\n")
	got, err := dyn(t).Resource(poolsGVR).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn(t).Resource(poolsGVR).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	})
	rc, _, _ := unstructured.NestedString(got.Object, "spec", "placeholderPod", "runtimeClassName")
	enabled, found, _ := unstructured.NestedBool(got.Object, "spec", "override", "enabled")
	if rc != "placeholder" || !found || enabled {
		t.Errorf("defaults not applied: runtimeClassName=%q override.enabled=%v (found %v)", rc, enabled, found)
	}
}

// TestInvalidCorpusRejectedByAPIServer sends every invalid object to the API server, the
// way its writer would: kubectl apply for specs, a status update for status. Objects the
// CRD alone cannot reject say so in the corpus (# apiserver-gap), naming the layer that
// does; for those the test proves the gap is still real, so the corpus stays honest.
func TestInvalidCorpusRejectedByAPIServer(t *testing.T) {
	requireCluster(t)
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			if o.APIServer == "" && o.APIServerGap == "" {
				t.Fatal(`corpus file has neither "# apiserver:" nor "# apiserver-gap:"`)
			}
			var msg string
			var accepted bool
			if o.Status {
				msg, accepted = writeStatus(t, o)
			} else {
				file := filepath.Join(cp.Root, "schema", "corpus", "invalid", o.Name)
				_, stderr, err := kubectlErr(t, "", "apply", "-f", file)
				msg, accepted = stderr, err == nil
				if accepted {
					_, _, _ = kubectlErr(t, "", "delete", "--wait=false", "-f", file)
				}
			}
			if os.Getenv("SANDBOXPOOL_DISCOVER") != "" {
				t.Logf("accepted=%v message: %s", accepted, msg)
			}
			switch {
			case o.APIServerGap != "":
				if !accepted {
					t.Errorf("corpus says the API server accepts this (%s), but it rejected it: %s", o.APIServerGap, msg)
				}
			case accepted:
				t.Errorf("API server accepted it; want %q", o.APIServer)
			case !strings.Contains(msg, o.APIServer):
				t.Errorf("API server message does not say %q:\n%s", o.APIServer, msg)
			}
		})
	}
}

// writeStatus creates the object without its status, then writes the status through the
// status subresource, as the agent and controller do.
func writeStatus(t *testing.T, o corpus.Object) (string, bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(o.JSON, &u.Object); err != nil {
		t.Fatal(err)
	}
	status := u.Object["status"]
	delete(u.Object, "status")
	ctx := context.Background()
	created, err := dyn(t).Resource(poolsGVR).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the base object: %v", err)
	}
	defer func() { _ = dyn(t).Resource(poolsGVR).Delete(ctx, u.GetName(), metav1.DeleteOptions{}) }()
	created.Object["status"] = status
	_, err = dyn(t).Resource(poolsGVR).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldValidation: "Strict"})
	if err != nil {
		return err.Error(), false
	}
	return "", true
}

func TestImmutableFields(t *testing.T) {
	requireCluster(t)
	kubectl(t, classYAML("immutable"), "apply", "-f", "-")
	t.Cleanup(func() { _, _, _ = kubectlErr(t, "", "delete", "sandboxpoolclass", "immutable", "--wait=false") })
	kubectl(t, poolYAML("immutable-node", "immutable"), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _, _ = kubectlErr(t, "", "delete", "sandboxpool", "placeholder-immutable-node", "--wait=false")
	})

	for _, tc := range []struct{ resource, name, patch, want string }{
		{"sandboxpoolclass", "immutable", `{"spec":{"selector":{"matchLabels":{"other":"x"}}}}`, "spec.selector is immutable"},
		{"sandboxpool", "placeholder-immutable-node", `{"spec":{"nodeName":"other-node"}}`, "spec.nodeName is immutable"},
		{"sandboxpool", "placeholder-immutable-node", `{"spec":{"classRef":{"name":"other"}}}`, "spec.classRef.name is immutable"},
	} {
		_, stderr, err := kubectlErr(t, "", "patch", tc.resource, tc.name, "--type=merge", "-p", tc.patch)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("patch %s %s: err=%v, want %q in %q", tc.resource, tc.patch, err, tc.want, stderr)
		}
	}
	// Fields that are not immutable still change.
	kubectl(t, "", "patch", "sandboxpool", "placeholder-immutable-node", "--type=merge",
		"-p", `{"spec":{"resourcePolicy":{"resources":{"cpu":"3","memory":"4Gi"}}}}`)
}

func TestStatusSubresource(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	pools := dyn(t).Resource(poolsGVR)
	u := fromYAML(t, poolYAML("status-node", "c")+"status: {phase: Ready}\n")
	created, err := pools.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "status"); found {
		t.Errorf("status written through the main resource on create: %v", created.Object["status"])
	}

	// Status through /status: written; a spec change in the same request is ignored and
	// the generation does not move.
	gen := created.GetGeneration()
	_ = unstructured.SetNestedField(created.Object, "Degraded", "status", "phase")
	_ = unstructured.SetNestedField(created.Object, "9", "spec", "resourcePolicy", "resources", "cpu")
	updated, err := pools.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(updated.Object, "status", "phase")
	cpu, _, _ := unstructured.NestedString(updated.Object, "spec", "resourcePolicy", "resources", "cpu")
	if phase != "Degraded" || cpu != "2" || updated.GetGeneration() != gen {
		t.Errorf("status update: phase=%q cpu=%q generation %d→%d", phase, cpu, gen, updated.GetGeneration())
	}

	// Status through the main resource: ignored; spec changes bump the generation.
	_ = unstructured.SetNestedField(updated.Object, "Unready", "status", "phase")
	_ = unstructured.SetNestedField(updated.Object, "3", "spec", "resourcePolicy", "resources", "cpu")
	again, err := pools.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ = unstructured.NestedString(again.Object, "status", "phase")
	if phase != "Degraded" || again.GetGeneration() != gen+1 {
		t.Errorf("main update: phase=%q generation %d→%d", phase, gen, again.GetGeneration())
	}
	if _, err := pools.UpdateStatus(ctx, fromYAML(t, poolYAML("no-such-node", "c")), metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("status of a missing pool: want NotFound, got %v", err)
	}
}
