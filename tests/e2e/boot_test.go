package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// bootWindow is how long the node runs without the API server before it comes back.
const bootWindow = 15 * time.Second

// TestNodeBootsWhileTheAPIServerIsDown answers the design review's open question: a node
// reboots while the API server is unreachable from it (the stack cuts the node's
// connection; the rest of the control plane runs on). What the static placeholder pod does:
//
//   - the manifest survives: the agent's start-up orphan cleanup cannot ask about the pool,
//     so it keeps the file;
//   - node-ctl starts and applies its config file: the pool's slice is enforced on its
//     cgroup from the first second;
//   - kubelet reads the manifest but cannot start the pod: it resolves runtimeClassName
//     from the API server (its RuntimeClass informer has nothing), so the sandbox is never
//     created and kubelet retries — no placeholder, so the node's capacity is not locked
//     in kubelet until the API server is back (no new pods can reach the node meanwhile
//     either: binding a pod needs the API server);
//   - API server back → RuntimeClass known → the pod starts, the mirror pod is updated, the
//     pool is Ready again, without anyone touching the node. (The controller's and the
//     webhook's Pods, which ran on this node, start again too; until the webhook does, the
//     agent's status writes fail, and the API server shows the status from before.)
func TestNodeBootsWhileTheAPIServerIsDown(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	ctx := context.Background()
	cut := false
	t.Cleanup(func() {
		if cut {
			if err := s.RestoreNodeLink(); err != nil {
				t.Error(err)
			}
		}
		if !s.Kubelet.Running() {
			if err := s.BootNode(ctx, true); err != nil {
				t.Error(err)
			}
		}
		if err := s.WaitCluster(ctx, 3*time.Minute); err != nil {
			t.Error(err)
		}
		ensureClass(t)
	})
	data := manifestState()
	pool := getPool(t)
	podName := mirrorPod(t).Name
	before := containerID(mirrorPod(t))

	s.CutNodeLink()
	cut = true
	if err := s.ShutdownNode(ctx); err != nil {
		t.Fatal(err)
	}
	kubeletLogStart := logSize(s.Kubelet.Log)
	t0 := time.Now()
	if err := s.BootNode(ctx, false); err != nil {
		t.Fatal(err)
	}

	// The node without the API server, for bootWindow: the placeholder never runs.
	for time.Since(t0) < bootWindow {
		out, err := s.Crictl(ctx, "pods", "--name", podName, "-q")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "" {
			t.Fatalf("a placeholder sandbox runs while the API server is unreachable: %s", out)
		}
		time.Sleep(200 * time.Millisecond) // the window under observation, sampled
	}
	if got := manifestState(); !maps.Equal(got, data) {
		t.Errorf("the manifests did not survive the boot: %d files, were %d", len(got), len(data))
	}
	st := nodeCtlState(t)
	if st == nil || st.Pool.UID != string(pool.UID) || st.AppliedResources["memory"] != baseMemory {
		t.Errorf("node-ctl after the boot: %+v; want the pool's config applied", st)
	}
	why := kubeletSays(s.Kubelet.Log, kubeletLogStart, podName, "RuntimeClass")
	if why == "" {
		t.Errorf("kubelet's log does not say why the pod does not start")
	}
	t.Logf("after %s without the API server: no sandbox; manifest kept; node-ctl applied %v; kubelet: %s",
		bootWindow, st.AppliedResources, why)
	t.Logf("meanwhile the API server shows the pool as %s", describe(getPool(t)))

	// Meanwhile the API server still shows the pod and the node as they were before the
	// reboot: nothing updates them (kube-controller-manager's node lifecycle controller
	// waits 50 s without a heartbeat before it marks the node).
	if pod := mirrorPod(t); pod != nil {
		t.Logf("meanwhile the API server shows the mirror pod %s, container %s (before the reboot: %s)", podState(pod), containerID(pod), before)
	}

	// The API server is back for the node: kubelet's informers sync (client-go retries
	// with a backoff), the RuntimeClass resolves, the pod starts in a new container.
	if err := s.RestoreNodeLink(); err != nil {
		t.Fatal(err)
	}
	cut = false
	t1 := time.Now()
	eventually(t, "the placeholder running again in a new container", 2*time.Minute, func() (bool, string) {
		pod := mirrorPod(t)
		out, err := s.Crictl(ctx, "pods", "--name", podName, "--state", "ready", "-q")
		return podReady(pod) && containerID(pod) != before && err == nil && strings.TrimSpace(out) != "",
			fmt.Sprintf("%s, container %s (before the reboot %s), ready sandboxes %q", podState(pod), containerID(pod), before, strings.TrimSpace(out))
	})
	running := time.Since(t1)
	if err := s.WaitCluster(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server reachable again → the controller's and the webhook's Pods running and the webhook answering in %s", time.Since(t1).Round(time.Millisecond))
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	t.Logf("API server reachable again → placeholder running in %s, pool Ready and synced in %s",
		running.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	if p := getPool(t); p.Status.Phase != v1alpha1.PhaseReady {
		t.Errorf("pool %s", describe(p))
	}
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// kubeletSays returns the first line of kubelet's log after offset that mentions both
// strings (the error kubelet reports for the pod), trimmed for a message.
func kubeletSays(path string, offset int64, a, b string) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	for l := range strings.SplitSeq(string(data[offset:]), "\n") {
		if strings.Contains(l, a) && strings.Contains(strings.ToLower(l), strings.ToLower(b)) {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			return fmt.Sprint(l)
		}
	}
	return ""
}
