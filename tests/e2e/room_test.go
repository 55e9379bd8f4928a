package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestGrowthThatDoesNotFit: a growth the node cannot hold leaves the running lock as it is,
// as kubelet and the scheduler count it, and the pool says why (status.resize Deferred with
// what was asked, what is free and what holds the rest, ResizeDeferred=True, a Warning
// event), Ready all along. More cpu or memory than the node has at all waits until the
// class is changed back; a growth that fits once another pod goes completes by itself when
// that pod is deleted.
func TestGrowthThatDoesNotFit(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	t.Cleanup(func() {
		deletePodNow(t, metav1.NamespaceDefault, "holder")
		ensureClass(t)
	})
	base := wrappers.Resources(baseCPU, baseMemory)
	alloc := nodeAllocatable(t)

	overCPU := alloc.Cpu().DeepCopy()
	overCPU.Add(resource.MustParse("1"))
	overMem := alloc.Memory().DeepCopy()
	overMem.Add(resource.MustParse("1Gi"))
	for _, tc := range []struct {
		what string
		want corev1.ResourceList
	}{
		{"cpu", wrappers.Resources(overCPU.String(), baseMemory)},
		{"memory", wrappers.Resources(baseCPU, overMem.String())},
	} {
		w := watchLock(t, base, base) // the lock must keep the old size all along
		setClassResources(t, tc.want)
		p := waitDeferred(t, "InsufficientRoom", tc.what+": asked", "more than the node has at all")
		t.Logf("%s beyond the node: %s", tc.what, p.Status.Resize.DeferredReason)
		holdsOldLock(t, base)
		waitEvent(t, "Warning/ResizeDeferred", tc.what+": asked")
		setClassResources(t, base)
		waitSynced(t, baseCPU, baseMemory, time.Minute)
		r := w.check(tc.what + " beyond the node, then back")
		if v := r.view(viewReady); v.bad > 0 {
			t.Errorf("the pool left Ready while its growth waited: %s", r)
		}
	}

	// A pod takes all the cpu but 300m; the pool asks for 600m more.
	fill := free(t)[corev1.ResourceCPU]
	fill.Sub(resource.MustParse("300m"))
	createRunning(t, regularPod("holder", corev1.ResourceList{corev1.ResourceCPU: fill, corev1.ResourceMemory: resource.MustParse("16Mi")}))
	grown := wrappers.Resources("1100m", baseMemory)
	w := watchLock(t, base, grown)
	setClassResources(t, grown)
	p := waitDeferred(t, "InsufficientRoom", "cpu: asked 1100m", "default/holder")
	t.Logf("held by another pod: %s", p.Status.Resize.DeferredReason)
	holdsOldLock(t, base)
	t0 := time.Now()
	deletePodNow(t, metav1.NamespaceDefault, "holder")
	waitSynced(t, "1100m", baseMemory, 2*time.Minute)
	t.Logf("the pod that held the room deleted → the growth completed in %s", time.Since(t0).Round(time.Millisecond))
	w.check("growth held by another pod, completed once it was deleted")
}

// TestGrowthKubeletRefuses runs the agent with --resize-preempt, so a growth goes to kubelet
// without the room check: kubelet's own admission refuses a growth beyond the node
// (UnexpectedAdmissionError: no pod to preempt frees enough), the pods that run keep the
// lock, and the pool carries kubelet's word. What a regular pod sees in that mode: kubelet
// preempts it to admit the growth (a static pod is critical to kubelet) — it, and not the
// cluster half's Pods (critical too).
func TestGrowthKubeletRefuses(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	clusterPods := clusterPodUIDs(t)
	if err := s.RestartAgent(ctx, "--resize-preempt"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.RestartAgent(ctx); err != nil {
			t.Error(err)
		}
		deletePodNow(t, metav1.NamespaceDefault, "preempted")
		ensureClass(t)
	})
	base := wrappers.Resources(baseCPU, baseMemory)
	alloc := nodeAllocatable(t)
	over := alloc.Cpu().DeepCopy()
	over.Add(resource.MustParse("1"))

	w := watchLock(t, base, base)
	setClassResources(t, wrappers.Resources(over.String(), baseMemory))
	p := waitDeferred(t, "RejectedByKubelet", "kubelet refused placeholder pod", "")
	t.Logf("kubelet refused the growth: %s", p.Status.Resize.DeferredReason)
	holdsOldLock(t, base)
	waitEvent(t, "Warning/PodRejected", "kubelet refused placeholder pod")
	setClassResources(t, base)
	waitSynced(t, baseCPU, baseMemory, time.Minute)
	w.check("growth refused by kubelet, then back")

	fill := free(t)[corev1.ResourceCPU]
	fill.Sub(resource.MustParse("100m"))
	createRunning(t, regularPod("preempted", corev1.ResourceList{corev1.ResourceCPU: fill, corev1.ResourceMemory: resource.MustParse("16Mi")}))
	grown := wrappers.Resources("900m", baseMemory)
	w = watchLock(t, base, grown)
	setClassResources(t, grown)
	eventually(t, "kubelet preempts the regular pod for the growth", time.Minute, func() (bool, string) {
		p := getPod(t, metav1.NamespaceDefault, "preempted")
		return p != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded), podState(p)
	})
	waitSynced(t, "900m", baseMemory, 2*time.Minute)
	w.check("growth with --resize-preempt on a full node")
	pod := getPod(t, metav1.NamespaceDefault, "preempted")
	t.Logf("with --resize-preempt the regular pod sees: %s; conditions %s; events %v", podState(pod), conditions(pod), podEvents(t, pod))
	if now := clusterPodUIDs(t); !maps.Equal(now, clusterPods) {
		t.Errorf("the cluster half's Pods changed while kubelet made room for the growth: %v → %v", clusterPods, now)
	}
}

// waitDeferred waits until the pool is Ready with its growth deferred: status.resize
// Deferred with a reason that says each of says, ResizeDeferred=True for reason.
func waitDeferred(t testing.TB, reason string, says ...string) *v1alpha1.SandboxPool {
	t.Helper()
	var last *v1alpha1.SandboxPool
	eventually(t, "the growth deferred ("+reason+")", time.Minute, func() (bool, string) {
		p := getPool(t)
		last = p
		if p == nil || p.Status.Resize.Status != v1alpha1.ResizeDeferred {
			return false, describe(p)
		}
		c := condOf(p, v1alpha1.ConditionResizeDeferred.String())
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || p.Status.Phase != v1alpha1.PhaseReady {
			return false, describe(p)
		}
		for _, s := range says {
			if !strings.Contains(p.Status.Resize.DeferredReason, s) {
				return false, "reason " + p.Status.Resize.DeferredReason
			}
		}
		return true, ""
	})
	return last
}

// holdsOldLock fails the test unless the node still shows the old lock: the mirror pods'
// requests and kubelet's, and the node's allocated requests (what `kubectl describe node`
// shows), with one placeholder pod running.
func holdsOldLock(t testing.TB, want corev1.ResourceList) {
	t.Helper()
	pods := mirrorPods(t)
	kl, err := kubeletLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := support.Requests(pods...)
	node := allocated(t)
	ok := len(pods) == 1 && podReady(&pods[0]) && equalLists(got, want) && equalLists(kl, want) &&
		node.Cpu().Cmp(want[corev1.ResourceCPU]) >= 0 && node.Memory().Cmp(want[corev1.ResourceMemory]) >= 0
	if !ok {
		t.Fatalf("the old lock %v is not held: %d mirror pods requesting %v, kubelet %v, node allocated %v", want, len(pods), got, kl, node)
	}
}

// waitEvent waits for an event about the pool that starts with prefix ("Type/Reason") and
// says says.
func waitEvent(t testing.TB, prefix, says string) {
	t.Helper()
	eventually(t, "event "+prefix, 30*time.Second, func() (bool, string) {
		evs := eventsFor(t, poolName)
		for _, e := range evs {
			if strings.HasPrefix(e, prefix) && strings.Contains(e, says) {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	})
}
