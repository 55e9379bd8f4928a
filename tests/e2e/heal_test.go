package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// nodeCtlIdentity is what shows that node-ctl was not restarted: its pid and start time.
func nodeCtlIdentity(t testing.TB) string {
	t.Helper()
	st := nodeCtlState(t)
	if st == nil {
		t.Fatal("node-ctl does not answer")
	}
	return fmt.Sprintf("pid %d started %s", st.PID, st.StartedAt.Format(time.RFC3339Nano))
}

func containerID(p *corev1.Pod) string {
	if p == nil || len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// TestMirrorPodDeletedComesBack: deleting a piece of the lock through the API is refused to a
// cluster admin (deploy/placeholder-pod-policy.yaml: the scheduler's view never lapses), and
// the mirror pod stays. Deleted by its node's own identity, as kubelet deletes it, it does
// not touch the static pod;
// kubelet creates a new mirror pod on its next sync, and node-ctl is not restarted.
// Meanwhile the scheduler does not count the lock, and the pool says so: it leaves Ready
// (PlaceholderPodReady=False, MirrorPodMissing) until the new mirror pod is in the API, and
// is Ready again as soon as it is — without waiting for kubelet's status sync to mark the new
// mirror pod Ready, as the placeholder shim already says the pod runs. kubelet syncs a
// mirror pod's status up to 10 s after it created it, and may do so before the agent
// reacts; the deletion is tried up to three times until one shows the pool Ready before the
// mirror pod is.
func TestMirrorPodDeletedComesBack(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	nc := nodeCtlIdentity(t)
	first := mirrorPod(t)
	err := kube.CoreV1().Pods(first.Namespace).Delete(context.Background(), first.Name, metav1.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'sandbox-pool-placeholder-pod-deletion'") {
		t.Fatalf("a cluster admin deleting mirror pod %s: %v; want the pod policy's refusal", first.Name, err)
	}
	if p := mirrorPod(t); p == nil || p.UID != first.UID {
		t.Fatalf("the mirror pod changed after a refused deletion: %s → %s", first.UID, podState(p))
	}
	node := nodeClient(t)
	const rounds = 3
	for round := 1; ; round++ {
		before := mirrorPod(t)
		t0 := time.Now()
		if err := node.CoreV1().Pods(before.Namespace).Delete(context.Background(), before.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		unready := waitPhase(t, v1alpha1.PhaseUnready, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
			c := condOf(p, v1alpha1.ConditionPlaceholderPodReady.String())
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonMirrorPodMissing.String()
		})
		// Ready again: only once a new mirror pod is in the API, and (if the round shows it)
		// before kubelet has reported that pod's status.
		var created time.Duration
		var after *corev1.Pod
		ready := waitPhase(t, v1alpha1.PhaseReady, 2*time.Minute, nil)
		after = mirrorPod(t)
		if after == nil || after.UID == before.UID {
			t.Fatalf("the pool is Ready again while the scheduler does not count its lock: mirror pods %s", podState(after))
		}
		created = ready
		early := !podReady(after)
		eventually(t, "the new mirror pod Running and Ready", 2*time.Minute, func() (bool, string) {
			after = mirrorPod(t)
			return podReady(after), podState(after)
		})
		t.Logf("round %d: mirror pod deleted → pool not Ready (MirrorPodMissing) in %s, Ready again %s after the deletion, "+
			"the new mirror pod %s; mirror pod Running and Ready %s after the deletion (uid %s → %s, container %s → %s)",
			round, unready.Round(time.Millisecond), created.Round(time.Millisecond),
			map[bool]string{true: "not Ready yet then", false: "already Ready then"}[early], time.Since(t0).Round(time.Millisecond),
			before.UID, after.UID, containerID(before), containerID(after))
		if containerID(after) != containerID(before) {
			t.Errorf("the static pod's container was restarted: %s → %s", containerID(before), containerID(after))
		}
		if early {
			break
		}
		if round == rounds {
			t.Fatalf("in %d rounds the pool was Ready again only once kubelet had reported the new mirror pod Ready", rounds)
		}
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
}

// deleteMirrorPod deletes the mirror pod (as the node, with the default grace period)
// and returns how long until a new one exists and until it is Running and Ready. kubelet
// deletes the old one at once, but creates the new one on its next periodic sync of the
// static pod (--sync-frequency: 10 s here, 1 min by default), and reports its status on
// its status manager's next sync (10 s).
func deleteMirrorPod(t testing.TB, pod *corev1.Pod) (created, ready time.Duration) {
	t.Helper()
	t0 := time.Now()
	if err := nodeClient(t).CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ready = eventually(t, "a new mirror pod", 2*time.Minute, func() (bool, string) {
		p := mirrorPod(t)
		if p != nil && p.UID != pod.UID && created == 0 {
			created = time.Since(t0)
		}
		return p != nil && p.UID != pod.UID && podReady(p), podState(p)
	})
	return created, ready
}

// TestManifestDeletedIsRestored: the agent restores the lock of a deleted manifest at
// once, with a new placeholder pod of its own (a new piece number, so kubelet does not hold
// it back behind the old pod of the same name). kubelet stops the old pod when its file
// goes and starts the new one; node-ctl is not restarted.
func TestManifestDeletedIsRestored(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	before := mirrorPod(t)
	nc := nodeCtlIdentity(t)

	restored, sandbox := deleteManifest(t)
	waitSynced(t, baseCPU, baseMemory, time.Minute)
	after := mirrorPod(t)
	t.Logf("manifest deleted → the lock restored by %s in %s; its sandbox running in %s (mirror pod %s → %s)",
		after.Name, restored.Round(time.Millisecond), sandbox.Round(time.Millisecond), before.Name, after.Name)
	if after.Name == before.Name {
		t.Errorf("the lock was restored under the old pod's name %s", after.Name)
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, nil)
}

// deleteManifest removes the pool's manifest (one piece, at rest) and returns how long until
// a new manifest of the agent's holds the pool's resources again, and until its placeholder
// sandbox runs.
func deleteManifest(t testing.TB) (restored, sandbox time.Duration) {
	t.Helper()
	files := pieceFiles()
	if len(files) != 1 {
		t.Fatalf("%d manifests, want 1", len(files))
	}
	old := readyPlaceholderSandboxes(t)
	t0 := time.Now()
	if err := os.Remove(files[0].Path); err != nil {
		t.Fatal(err)
	}
	restored = eventually(t, "the lock restored by a new manifest", 10*time.Second, func() (bool, string) {
		now := pieceFiles()
		return len(now) == 1 && now[0].Path != files[0].Path && equalLists(now[0].Resources, files[0].Resources),
			fmt.Sprintf("%d manifests", len(now))
	})
	eventually(t, "the new placeholder's sandbox running", time.Minute, func() (bool, string) {
		now := readyPlaceholderSandboxes(t)
		return len(now) == 1 && !slices.Contains(old, now[0]), fmt.Sprintf("ready sandboxes %q (before: %q)", now, old)
	})
	return restored, time.Since(t0)
}

// readyPlaceholderSandboxes are the ids of the pool's ready placeholder sandboxes as
// containerd's CRI has them.
func readyPlaceholderSandboxes(t testing.TB) []string {
	t.Helper()
	out, err := suite.s.Crictl(context.Background(), "pods", "--state", "ready",
		"--label", v1alpha1.LabelPoolName+"="+naming.LabelValue(poolName), "--namespace", v1alpha1.DefaultPodNamespace, "-q")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}

// equalLists compares two resource lists by value.
func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
