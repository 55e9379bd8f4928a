package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestResize resizes the class up, down, and changes only its template, on a node with room:
// each time the lock watcher sees neither kubelet's nor the scheduler's count of the lock
// below min(old, new) nor below node-ctl, and the pool never leaves Ready. Then a downscale
// on a node without room for a second copy of the pool, and a memory downscale held back
// while a real process holds memory in node-ctl's cgroup.
func TestResize(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() {
		deletePodNow(t, metav1.NamespaceDefault, "filler")
		ensureClass(t)
	})
	base, up := wrappers.Resources(baseCPU, baseMemory), wrappers.Resources("700m", "192Mi")

	w := watchLock(t, base, up)
	setClassResources(t, up)
	waitSynced(t, "700m", "192Mi", 2*time.Minute)
	r := w.check("scale up 500m/128Mi → 700m/192Mi")
	if v := r.view(viewReady); v.bad > 0 {
		t.Errorf("the pool left Ready during a scale-up: %d samples, longest %s", v.bad, v.gap)
	}
	if p := getPool(t); p.Status.Resize.Status != v1alpha1.ResizeCompleted || p.Status.Resize.RequestedMemory.String() != "192Mi" {
		t.Errorf("resize status after the scale-up: %+v", p.Status.Resize)
	}

	w = watchLock(t, up, base)
	setClassResources(t, base)
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	r = w.check("scale down 700m/192Mi → 500m/128Mi, the node has room")
	if v := r.view(viewReady); v.bad > 0 {
		t.Errorf("the pool left Ready during a scale-down on a node with room: %d samples, longest %s", v.bad, v.gap)
	}

	w = watchLock(t, base, base)
	setClassAnnotation(t, "e2e.sandbox-pool.io/generation", "2")
	eventually(t, "the placeholder pod carries the new annotation", time.Minute, func() (bool, string) {
		pods := mirrorPods(t)
		return len(pods) == 1 && pods[0].Annotations["e2e.sandbox-pool.io/generation"] == "2" && podReady(&pods[0]),
			fmt.Sprintf("%d mirror pods", len(pods))
	})
	waitSynced(t, baseCPU, baseMemory, time.Minute)
	r = w.check("template change (an annotation), the node has room")
	if v := r.view(viewReady); v.bad > 0 {
		t.Errorf("the pool left Ready during a template change: %d samples, longest %s", v.bad, v.gap)
	}

	// A node without room for a second copy of the pool: a regular pod takes all the cpu but
	// 100m. The downscale replaces the pod in place: kubelet takes the removal and the new
	// pod one after the other.
	fill := free(t)[corev1.ResourceCPU]
	fill.Sub(resource.MustParse("100m"))
	createRunning(t, regularPod("filler", corev1.ResourceList{corev1.ResourceCPU: fill, corev1.ResourceMemory: resource.MustParse("16Mi")}))
	w = watchLock(t, base, wrappers.Resources("400m", baseMemory))
	setClassResources(t, wrappers.Resources("400m", baseMemory))
	waitSynced(t, "400m", baseMemory, 2*time.Minute)
	r = w.checkWindows("scale down 500m → 400m cpu on a node without room for a second copy", 1)
	t.Logf("scale-down without room: the pool was not Ready for %s (the new placeholder pod starting)", r.view(viewReady).gap)
	deletePodNow(t, metav1.NamespaceDefault, "filler")
	setClassResources(t, base)
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)

	// 126 MiB in use is above 85 % of 128Mi (108.8 MiB): the downscale waits.
	setClassResources(t, wrappers.Resources(baseCPU, "160Mi"))
	waitSynced(t, baseCPU, "160Mi", 2*time.Minute)
	hog := nodectltest.StartHog(t, s.NodeCtlCgroup, 126)
	if err := hog.WaitAllocated(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The agent decides with the usage it last polled: wait until it has seen more than
	// the watermark. It reports the figure in status.poolInfo again only once it moved by
	// 16 MiB, so a figure reported while the hog was still allocating stays until then: from
	// any figure up to 110 MiB that happens once the hog holds its 126 MiB.
	eventually(t, "the agent sees the memory in use", 20*time.Second, func() (bool, string) {
		p := getPool(t)
		return p.Status.PoolInfo != nil && ptr.Deref(p.Status.PoolInfo.AllocatedMemoryBytes, 0) > 109<<20, fmt.Sprintf("%+v", p.Status.PoolInfo)
	})
	w = watchLock(t, wrappers.Resources(baseCPU, "160Mi"), base)
	t0 := time.Now()
	setClassResources(t, base)
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		r := p.Status.Resize
		return r.Status == v1alpha1.ResizeDeferred && strings.Contains(r.DeferredReason, "85%") &&
			condIs(p, v1alpha1.ConditionResizeDeferred.String(), metav1.ConditionTrue)
	})
	t.Logf("deferred: %q", getPool(t).Status.Resize.DeferredReason)
	if got := support.Requests(mirrorPods(t)...); got.Memory().String() != "160Mi" {
		t.Errorf("the deferred downscale changed the lock: %v", got)
	}
	eventually(t, "a Warning event once deferred for longer than 3 s", 30*time.Second, func() (bool, string) {
		evs := eventsFor(t, poolName)
		for _, e := range evs {
			if strings.HasPrefix(e, "Warning/ResizeDeferredTooLong") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "; ")
	})
	// Ready all along: a deferred downscale alone keeps the pool Ready.
	if p := getPool(t); p.Status.Phase != v1alpha1.PhaseReady {
		t.Errorf("phase while deferred: %s", describe(p))
	}
	hog.Release()
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	w.check(fmt.Sprintf("deferred scale down 160Mi → 128Mi, completed once the memory was freed (%s)", time.Since(t0).Round(time.Millisecond)))
}

// setClassAnnotation sets an annotation of the suite class's placeholder pods.
func setClassAnnotation(t testing.TB, key, value string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c v1alpha1.SandboxPoolClass
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: className}, &c); err != nil {
			return err
		}
		if c.Spec.PlaceholderPod.Annotations == nil {
			c.Spec.PlaceholderPod.Annotations = map[string]string{}
		}
		c.Spec.PlaceholderPod.Annotations[key] = value
		return k8s.Update(context.Background(), &c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// free is the node's allocatable less what the pods bound to it request.
func free(t testing.TB) corev1.ResourceList {
	t.Helper()
	out := nodeAllocatable(t).DeepCopy()
	for r, q := range allocated(t) {
		f := out[r]
		f.Sub(q)
		out[r] = f
	}
	return out
}

// createRunning creates a regular pod and waits until it runs.
func createRunning(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if _, err := kube.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod "+pod.Name+" running", time.Minute, func() (bool, string) {
		p := getPod(t, pod.Namespace, pod.Name)
		return podReady(p), podState(p)
	})
}
