package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

	took := deleteMirrorPod(t, before)
	after := mirrorPod(t)
	t.Logf("mirror pod deleted → a new one Running and Ready in %s (uid %s → %s, container %s → %s)",
		took.Round(time.Millisecond), before.UID, after.UID, containerID(before), containerID(after))
	if containerID(after) != containerID(before) {
		t.Errorf("the static pod's container was restarted: %s → %s", containerID(before), containerID(after))
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, nil)
}

// deleteMirrorPod deletes the mirror pod (as a user would, with the default grace period)
// and waits until a new one is Running and Ready.
func deleteMirrorPod(t testing.TB, pod *corev1.Pod) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := kube.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new mirror pod", 30*time.Second, func() (bool, string) {
		p := mirrorPod(t)
		return p != nil && p.UID != pod.UID && podReady(p), podState(p)
	})
	return time.Since(t0)
}

// TestManifestDeletedIsRestored: the agent rewrites a deleted manifest at once, byte for
// byte. kubelet sees the file go and come back: it stops the static pod's container and
// starts it again (the mirror pod object stays); node-ctl is not restarted.
func TestManifestDeletedIsRestored(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	data, err := os.ReadFile(manifestPath())
	if err != nil {
		t.Fatal(err)
	}
	before := mirrorPod(t)
	nc := nodeCtlIdentity(t)

	restored, ready := deleteManifest(t, data)
	after := mirrorPod(t)
	t.Logf("manifest deleted → restored in %s; the pod Running and Ready again in %s (mirror pod uid %s → %s, container %s → %s)",
		restored.Round(time.Millisecond), ready.Round(time.Millisecond), before.UID, after.UID, containerID(before), containerID(after))
	if after.UID != before.UID {
		t.Errorf("the mirror pod was replaced: %s → %s", before.UID, after.UID)
	}
	if now := nodeCtlIdentity(t); now != nc {
		t.Errorf("node-ctl restarted: %s → %s", nc, now)
	}
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, nil)
}

// deleteManifest removes the manifest and returns how long until it is back (the same
// bytes) and until the pod is Running and Ready again in a new container: kubelet watches
// the directory and stops the static pod when its file goes, before the agent's rewrite
// brings it back.
func deleteManifest(t testing.TB, data []byte) (restored, ready time.Duration) {
	t.Helper()
	old := containerID(mirrorPod(t))
	t0 := time.Now()
	if err := os.Remove(manifestPath()); err != nil {
		t.Fatal(err)
	}
	restored = eventually(t, "manifest restored", 10*time.Second, func() (bool, string) {
		got, err := os.ReadFile(manifestPath())
		return err == nil && bytes.Equal(got, data), fmt.Sprint(err)
	})
	eventually(t, "the pod Running and Ready again in a new container", 30*time.Second, func() (bool, string) {
		p := mirrorPod(t)
		return podReady(p) && containerID(p) != old, fmt.Sprintf("%s, container %s (was %s)", podState(p), containerID(p), old)
	})
	return restored, time.Since(t0)
}
