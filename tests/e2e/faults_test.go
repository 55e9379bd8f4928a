package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
)

// TestNodeCtlKilled: node-ctl crashes and its unit does not bring it back → the agent
// reports NodeCtlHealthy=False with downSince → Degraded → Unready once down longer than
// the controller's --nodectl-unready-after (shortened to 6 s). The placeholder pod is not
// touched. node-ctl back → Ready.
func TestNodeCtlKilled(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() {
		if err := s.NodeCtl.StartUnit(); err != nil {
			t.Error(err)
		}
		ensureClass(t)
	})
	pod := mirrorPod(t)

	if err := s.NodeCtl.SetStopped(true); err != nil {
		t.Fatal(err)
	}
	if err := s.NodeCtl.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	degraded := waitPhase(t, v1alpha1.PhaseDegraded, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		return condIs(p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionFalse) && p.Status.NodeCtl != nil && p.Status.NodeCtl.DownSince != nil
	})
	unready := waitPhase(t, v1alpha1.PhaseUnready, 30*time.Second, nil) + degraded
	unreadyAt := time.Now()
	t.Logf("node-ctl killed → Degraded in %s → Unready in %s (--nodectl-unready-after %s, from status.nodeCtl.downSince, which has whole seconds)",
		degraded.Round(time.Millisecond), unready.Round(time.Millisecond), suiteTimers().NodeCtlUnreadyAfter)
	if downSince := getPool(t).Status.NodeCtl.DownSince.Time; unreadyAt.Before(downSince.Add(suiteTimers().NodeCtlUnreadyAfter)) {
		t.Errorf("Unready at %s, before downSince %s + --nodectl-unready-after %s", unreadyAt, downSince, suiteTimers().NodeCtlUnreadyAfter)
	}
	if now := mirrorPod(t); now == nil || now.UID != pod.UID || containerID(now) != containerID(pod) || !podReady(now) {
		t.Errorf("the placeholder pod changed while node-ctl was down: %s", podState(now))
	}

	if err := s.NodeCtl.StartUnit(); err != nil {
		t.Fatal(err)
	}
	back := waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		return condIs(p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionTrue) && p.Status.NodeCtl.DownSince == nil
	})
	t.Logf("node-ctl back → Ready in %s (down %s in all)", back.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}

// TestAgentStopped: the agent stops → its Lease is not renewed → after the TTL (shortened
// to 4 s) the controller sets PlaceholderAgentHealthy=False and the phase drops to
// Degraded (the pod still runs: docs/design.md §3.4 rule 4). The agent back → Ready.
func TestAgentStopped(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() {
		if err := s.Agent.StartUnit(); err != nil {
			t.Error(err)
		}
		ensureClass(t)
	})
	pod := mirrorPod(t)

	if err := s.Agent.StopUnit(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	dropped := waitPhase(t, v1alpha1.PhaseDegraded, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		c := condOf(p, v1alpha1.ConditionPlaceholderAgentHealthy.String())
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "LeaseExpired"
	})
	t.Logf("agent stopped → PlaceholderAgentHealthy=False (LeaseExpired), phase Degraded in %s (--lease-ttl %s)",
		dropped.Round(time.Millisecond), suiteTimers().LeaseTTL)
	if now := mirrorPod(t); now == nil || now.UID != pod.UID || !podReady(now) {
		t.Errorf("the placeholder pod changed while the agent was down: %s", podState(now))
	}

	if err := s.Agent.StartUnit(); err != nil {
		t.Fatal(err)
	}
	back := waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		return condIs(p, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue)
	})
	t.Logf("agent started → Ready in %s", back.Round(time.Millisecond))
}

// TestNodeDeleted: the Node object is deleted → NodeNotFound=True → Unready. kubelet
// registers a node only when it starts, so the node comes back when kubelet is restarted
// (the static pod keeps running meanwhile); the agent's Lease token was bound to the deleted
// Node and is refused from then on, so, as docs/operator-guide.md says ("Lease identity
// tokens"), the operator makes a new one for the node with hack/agent-lease-credentials.sh
// and copies it to the node, where the agent takes it → Ready. Meanwhile the cluster does what it does
// to a deleted Node: the garbage collector deletes its mirror pods (a mirror pod is owned by
// its Node; kubelet creates it again once the node is back), and its Pods leave their
// Services' endpoints (the EndpointSlice controller skips Pods of a missing node) — here
// the webhook's, so the agent's status writes fail until the node is registered again.
func TestNodeDeleted(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if !s.Kubelet.Running() {
			_ = s.Kubelet.Start()
		}
		eventually(t, "node Ready", 2*time.Minute, func() (bool, string) { return s.NodeReady(ctx), "" })
		renewLeaseCredential(t, s)
		ensureClass(t)
	})
	pod := mirrorPod(t)
	if err := kube.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	unready := waitPhase(t, v1alpha1.PhaseUnready, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		return condIs(p, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionTrue)
	})
	t.Logf("node deleted → NodeNotFound=True, Unready in %s", unready.Round(time.Millisecond))

	if err := s.Kubelet.Restart(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	back := eventually(t, "node registered and Ready again", 2*time.Minute, func() (bool, string) { return s.NodeReady(ctx), "" })
	if err := s.WaitCluster(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	renewLeaseCredential(t, s)
	ready := waitPhase(t, v1alpha1.PhaseReady, time.Minute, func(p *v1alpha1.SandboxPool) bool {
		return condIs(p, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionFalse)
	})
	// The mirror pod, created again if the garbage collector took it, once kubelet has
	// reported its container.
	var now *corev1.Pod
	eventually(t, "the mirror pod with its container", time.Minute, func() (bool, string) {
		now = mirrorPod(t)
		return now != nil && containerID(now) != "", podState(now)
	})
	t.Logf("kubelet restarted → node Ready in %s, pool Ready %s later; mirror pod %s → %s, container %s → %s",
		back.Round(time.Millisecond), ready.Round(time.Millisecond), pod.UID, now.UID, containerID(pod), containerID(now))
	if containerID(now) != containerID(pod) {
		t.Errorf("the static pod's container was restarted: %s → %s", containerID(pod), containerID(now))
	}
}

// renewLeaseCredential does what an operator does when the agent's Lease token no longer
// works (its Node was deleted): hack/agent-lease-credentials.sh makes a new token, bound to
// the node's Node object as it is now, and it is copied over the token file of the agent's
// Lease kubeconfig, where the agent takes it.
func renewLeaseCredential(t *testing.T, s *stack.Stack) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(s.CP.Root, "hack", "agent-lease-credentials.sh"), nodeName, dir)
	cmd.Env = append(os.Environ(), "KUBECTL="+s.Opts.Tools.Kubectl(), "KUBECONFIG="+s.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "bound to Node "+nodeName) {
		t.Fatalf("hack/agent-lease-credentials.sh: %v: %s", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.InstallVars()["LEASE_KUBECONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.BearerTokenFile, token, 0o600); err != nil {
		t.Fatal(err)
	}
}
