package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestMirrorPodDeletedComesBack: deleting the mirror pod through the API does not touch the
// static pod; kubelet creates a new mirror pod within seconds, and node-ctl is not
// restarted.
func TestMirrorPodDeletedComesBack(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	before := mirrorPod(t)
	nc := nodeCtlIdentity(t)

	created, ready := deleteMirrorPod(t, before)
	after := mirrorPod(t)
	t.Logf("mirror pod deleted → a new one in %s, Running and Ready in %s (uid %s → %s, container %s → %s)",
		created.Round(time.Millisecond), ready.Round(time.Millisecond), before.UID, after.UID, containerID(before), containerID(after))
	if containerID(after) != containerID(before) {
		t.Errorf("the static pod's container was restarted: %s → %s", containerID(before), containerID(after))
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, nil)
}

// deleteMirrorPod deletes the mirror pod (as a user would, with the default grace period)
// and returns how long until a new one exists and until it is Running and Ready. kubelet
// deletes the old one at once, but creates the new one on its next periodic sync of the
// static pod (--sync-frequency: 10 s here, 1 min by default), and reports its status on
// its status manager's next sync (10 s).
func deleteMirrorPod(t testing.TB, pod *corev1.Pod) (created, ready time.Duration) {
	t.Helper()
	t0 := time.Now()
	if err := kube.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
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

// TestManifestDeletedIsRestored: the agent rewrites a deleted manifest at once, byte for
// byte. kubelet sees the file go and come back: it stops the static pod and starts it again
// (a new sandbox at once, the container after kubelet's restart back-off; the mirror pod
// object stays, and so do the pod's requests in kubelet's and the scheduler's accounting);
// node-ctl is not restarted.
func TestManifestDeletedIsRestored(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	data, err := os.ReadFile(manifestPath())
	if err != nil {
		t.Fatal(err)
	}
	before := mirrorPod(t)
	nc := nodeCtlIdentity(t)

	restored, sandbox := deleteManifest(t, data)
	t0 := time.Now()
	eventually(t, "the mirror pod Ready (its container restarted)", 2*time.Minute, func() (bool, string) {
		p := mirrorPod(t)
		return podReady(p) && containerID(p) != containerID(before), podState(p)
	})
	after := mirrorPod(t)
	t.Logf("manifest deleted → restored in %s; the placeholder's sandbox running again in %s; its container and the mirror pod Ready %s later (uid %s → %s, container %s → %s)",
		restored.Round(time.Millisecond), sandbox.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond),
		before.UID, after.UID, containerID(before), containerID(after))
	if after.UID != before.UID {
		t.Errorf("the mirror pod was replaced: %s → %s", before.UID, after.UID)
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, nil)
}

// deleteManifest removes the manifest and returns how long until it is back (the same
// bytes) and until the placeholder pod's sandbox runs again: kubelet watches the directory
// and stops the static pod when its file goes, before the agent's rewrite brings it back,
// then starts a new sandbox (the shim's Start of it is the agent's PlaceholderPodReady). The
// pod's container follows after kubelet's restart back-off: kubelet counts the stop as a
// restart of the same pod (same content, same UID), 10 s the first time, doubling up to
// 5 min on repeated deletions.
func deleteManifest(t testing.TB, data []byte) (restored, sandbox time.Duration) {
	t.Helper()
	old := readyPlaceholderSandbox(t)
	t0 := time.Now()
	if err := os.Remove(manifestPath()); err != nil {
		t.Fatal(err)
	}
	restored = eventually(t, "manifest restored", 10*time.Second, func() (bool, string) {
		got, err := os.ReadFile(manifestPath())
		return err == nil && bytes.Equal(got, data), fmt.Sprint(err)
	})
	eventually(t, "the placeholder's sandbox running again", time.Minute, func() (bool, string) {
		now := readyPlaceholderSandbox(t)
		return now != "" && now != old, fmt.Sprintf("ready sandbox %q (before: %q)", now, old)
	})
	return restored, time.Since(t0)
}

// readyPlaceholderSandbox is the id of the placeholder pod's ready sandbox as containerd's
// CRI has it ("" when there is none).
func readyPlaceholderSandbox(t testing.TB) string {
	t.Helper()
	out, err := suite.s.Crictl(context.Background(), "pods", "--state", "ready", "--name", "sandbox-pool-"+nodeName,
		"--namespace", v1alpha1.DefaultPodNamespace, "-q")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
