package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// Faults in the middle of a scale-up, on the real stack, each with the lock watcher on: the
// pool converges to the new size, and neither kubelet's nor the scheduler's count of the
// lock is ever below the old size or below what node-ctl runs.

// resizeWithFault scales the class from base to up, runs fault as soon as the agent has
// written the growth's placeholder pod (before node-ctl grows: it grows only once that pod
// runs), and waits for the pool to converge.
func resizeWithFault(t *testing.T, what string, fault func(t *testing.T, w *lockWatch)) {
	t.Helper()
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	base, up := wrappers.Resources(baseCPU, baseMemory), wrappers.Resources("700m", "192Mi")
	before := pieceNumbers()
	w := watchLock(t, base, up)
	setClassResources(t, up)
	eventually(t, "the growth's placeholder pod written", time.Minute, func() (bool, string) {
		for _, n := range pieceNumbers() {
			if n > before[len(before)-1] {
				return true, ""
			}
		}
		return false, fmt.Sprint(pieceNumbers())
	})
	applied := appliedNow(context.Background())
	fault(t, w)
	t0 := time.Now()
	waitSynced(t, "700m", "192Mi", 3*time.Minute)
	t.Logf("%s: node-ctl applied %v when the fault came; converged %s after it", what, applied, time.Since(t0).Round(time.Millisecond))
	w.check("scale-up with " + what)
}

// pieceNumbers are the numbers of the pool's manifests, in order.
func pieceNumbers() []int {
	var out []int
	for _, f := range pieceFiles() {
		out = append(out, f.Piece)
	}
	if len(out) == 0 {
		out = []int{0}
	}
	return out
}

func TestAgentKilledDuringResize(t *testing.T) {
	s := requireStack(t)
	resizeWithFault(t, "the agent SIGKILLed after it wrote the growth's pod", func(t *testing.T, _ *lockWatch) {
		if err := s.Agent.Kill(); err != nil { // its unit starts it again
			t.Fatal(err)
		}
	})
}

func TestNodeCtlKilledDuringResize(t *testing.T) {
	s := requireStack(t)
	resizeWithFault(t, "node-ctl SIGKILLed mid-resize", func(t *testing.T, _ *lockWatch) {
		if err := s.NodeCtl.Kill(); err != nil { // its unit starts it again
			t.Fatal(err)
		}
	})
}

func TestKubeletRestartedDuringResize(t *testing.T) {
	s := requireStack(t)
	resizeWithFault(t, "kubelet restarted mid-resize", func(t *testing.T, w *lockWatch) {
		w.kubeletRestarts()
		if err := s.RestartKubelet(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	})
}

func TestContainerdRestartedDuringResize(t *testing.T) {
	s := requireStack(t)
	resizeWithFault(t, "containerd restarted mid-resize", func(t *testing.T, _ *lockWatch) {
		if err := s.Containerd.Restart(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAPIServerDownDuringResize(t *testing.T) {
	s := requireStack(t)
	resizeWithFault(t, "the API server down for 30 s mid-resize", func(t *testing.T, _ *lockWatch) {
		restart, err := s.CP.KillAPIServer()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second) // the outage under test
		if err := restart(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWebhookDownDuringResize: the admission webhook (failurePolicy Fail) is down — its
// Deployment scaled to 0 — while the pool grows. The agent's status writes fail meanwhile,
// and the data path does not wait on them: the growth's placeholder pod starts (the shim's
// calls to the agent never wait on the API server) and node-ctl grows to the new size
// while the webhook is still down. Once it is back, the status catches up.
func TestWebhookDownDuringResize(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	webhookDown := false
	t.Cleanup(func() {
		if webhookDown {
			scaleDeployment(t, stack.WebhookDeployment, 2)
		}
		ensureClass(t)
	})
	base, up := wrappers.Resources(baseCPU, baseMemory), wrappers.Resources("700m", "192Mi")
	w := watchLock(t, base, up)
	setClassResources(t, up)
	// The controller's snapshot update goes through the webhook too: stop it once the pool
	// asks for the new size.
	eventually(t, "the pool's snapshot at the new size", time.Minute, func() (bool, string) {
		p := getPool(t)
		return p != nil && equalLists(p.Spec.ResourcePolicy.Resources, up), describe(p)
	})
	webhookDown = true
	scaleDeployment(t, stack.WebhookDeployment, 0)
	if err := suite.s.WebhookAnswers(context.Background()); err == nil {
		t.Fatal("the webhook still answers with its Deployment at 0 replicas")
	}
	t0 := time.Now()
	eventually(t, "the lock and node-ctl at the new size with the webhook down", 2*time.Minute, func() (bool, string) {
		pods := mirrorPods(t)
		applied := appliedNow(context.Background())
		ready := len(pods) > 0
		for i := range pods {
			ready = ready && podReady(&pods[i])
		}
		return ready && equalLists(support.Requests(pods...), up) && equalLists(applied, up),
			fmt.Sprintf("%d mirror pods requesting %v (ready %v), node-ctl %v", len(pods), support.Requests(pods...), ready, applied)
	})
	t.Logf("webhook down: the lock and node-ctl reached the new size %s after it stopped; the pool shows %s",
		time.Since(t0).Round(time.Millisecond), describe(getPool(t)))
	scaleDeployment(t, stack.WebhookDeployment, 2)
	webhookDown = false
	waitSynced(t, "700m", "192Mi", 2*time.Minute)
	w.check("scale-up with the webhook down")
}

// TestReadinessFollowsTheShim: the placeholder shim of the running pod is SIGKILLed (it says
// nothing): within one node-ctl poll the pool's PlaceholderPodReady is False, reason
// ShimExited, naming the pod. kubelet starts the pod's sandbox again and it turns True. The
// lock is not touched meanwhile.
func TestReadinessFollowsTheShim(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	// The test before may have left the lock in two pods a moment longer (a growth's pod
	// beside the old one until the fold), and a removed pod's shim may outlive it a moment:
	// the kill is of the shim that runs the one ready sandbox, the pod the lock folds into.
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	var pid int
	eventually(t, "the lock in one placeholder pod", time.Minute, func() (bool, string) {
		sandboxes, shims := readyPlaceholderSandboxes(t), suite.s.PlaceholderShims()
		pid = 0
		for p, id := range shims {
			if len(sandboxes) == 1 && id == sandboxes[0] {
				pid = p
			}
		}
		return pid != 0 && len(mirrorPods(t)) == 1,
			fmt.Sprintf("ready sandboxes %q, placeholder shims (pid: sandbox) %v, %d mirror pods", sandboxes, shims, len(mirrorPods(t)))
	})
	pod := mirrorPod(t)
	w := watchLock(t, wrappers.Resources(baseCPU, baseMemory), wrappers.Resources(baseCPU, baseMemory))
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	notReady := eventually(t, "PlaceholderPodReady=False, ShimExited", 10*time.Second, func() (bool, string) {
		p := getPool(t)
		c := condOf(p, v1alpha1.ConditionPlaceholderPodReady.String())
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ShimExited" && strings.Contains(c.Message, pod.Name), describe(p)
	})
	t.Logf("shim killed → PlaceholderPodReady=False (ShimExited) in %s (node-ctl poll %s): %q", notReady.Round(time.Millisecond),
		suiteTimers().NodeCtlPollInterval, condOf(getPool(t), v1alpha1.ConditionPlaceholderPodReady.String()).Message)
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	t.Logf("ready again %s after the kill", time.Since(t0).Round(time.Millisecond))
	w.check("placeholder shim killed")
}

// TestReadinessFollowsKubeletsRefusal: kubelet restarts with so much cpu reserved for the
// system that the placeholder pod no longer fits: its admission refuses the static pod, the
// mirror pod fails, and the pool's PlaceholderPodReady turns False with kubelet's reason and
// message. With the reservation gone, the agent restores the lock and the pool is Ready.
// (kubelet admits the pods it finds at its start against the node's allocatable as the API
// server has it: the refusal comes on the restart after the node reports the reservation.)
// What is left allocatable is what the cluster half's Pods request, each less than the
// placeholder pod: kubelet admits them again (the webhook must answer the agent's status
// writes), whichever it admits first.
func TestReadinessFollowsKubeletsRefusal(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	t.Cleanup(func() {
		if err := s.RestartKubelet(ctx, nil); err != nil {
			t.Error(err)
		}
		ensureClass(t)
	})
	clusterPods := clusterPodUIDs(t)
	capacity := nodeCapacity(t)
	left := clusterRequests(t)[corev1.ResourceCPU]
	reserved := capacity.Cpu().DeepCopy()
	reserved.Sub(left)
	restartReporting := func(systemReserved map[string]string, cpu string) {
		t.Helper()
		if err := s.RestartKubelet(ctx, systemReserved); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the node's allocatable cpu at "+cpu, time.Minute, func() (bool, string) {
			a := nodeAllocatable(t)
			return a.Cpu().Cmp(resource.MustParse(cpu)) == 0, a.Cpu().String()
		})
	}
	restartReporting(map[string]string{"cpu": reserved.String()}, left.String())
	if err := s.RestartKubelet(ctx, map[string]string{"cpu": reserved.String()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PlaceholderPodReady=False with kubelet's refusal", 2*time.Minute, func() (bool, string) {
		p := getPool(t)
		c := condOf(p, v1alpha1.ConditionPlaceholderPodReady.String())
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "PodRejected" &&
			(strings.Contains(c.Message, "OutOfcpu") || strings.Contains(c.Message, "UnexpectedAdmissionError")), describe(p)
	})
	t.Logf("kubelet refuses the placeholder pod: %q", condOf(getPool(t), v1alpha1.ConditionPlaceholderPodReady.String()).Message)
	restartReporting(nil, capacity.Cpu().String())
	waitSynced(t, baseCPU, baseMemory, 3*time.Minute)
	if now := clusterPodUIDs(t); !maps.Equal(now, clusterPods) {
		t.Errorf("the cluster half's Pods changed across kubelet's restarts: %v → %v", clusterPods, now)
	}
}

// nodeCapacity is the node's capacity.
func nodeCapacity(t testing.TB) corev1.ResourceList {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.Capacity
}
