package agent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
)

// TestAgentFigures measures the agent as its own process (cmd/placeholder-agent, the node's
// identity, a real node-ctl): pool spec change → manifest on disk, manifest deleted →
// restored (p50/p99 over 50 each), and the agent's and node-ctl's CPU and memory at rest.
// It prints figures and asserts none. make bench-agent runs it (SANDBOXPOOL_BENCH=1).
func TestAgentFigures(t *testing.T) {
	if os.Getenv("SANDBOXPOOL_BENCH") == "" {
		t.Skip("set SANDBOXPOOL_BENCH=1 to measure the agent (make bench-agent)")
	}
	cp := suite.Require(t)
	ctx := context.Background()
	n := newNode(t, "figures-node")
	dir := t.TempDir()
	bin, err := support.BuildBinary(cp.Root, dir, "./cmd/placeholder-agent")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := cp.KubeconfigFor(dir, nodeUser(n.name), "system:nodes", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	o := n.options()
	proc := support.StartProcess(t, "placeholder-agent", bin, "--kubeconfig", kc, "--node-name", n.name,
		"--manifest-dir", o.ManifestDir, "--pause-image", o.PauseImage, "--node-ctl-socket", o.NodeCtlSocket,
		"--node-ctl-config", o.NodeCtlConfig, "--node-ctl-restart-command=", "--node-ctl-stop-command=",
		"--shim-address", o.ShimAddress, "--healthz-addr=0", "--metrics-addr=0", "--lease-kubeconfig", o.LeaseKubeconfig)
	startKubelet(n)
	pool := syncedPool(t, n)

	const runs = 50
	// waitFor polls the pool's manifests until ok holds of one of them.
	waitFor := func(what string, ok func(f manifest.File) bool) time.Duration {
		return support.Eventually(t, what, 30*time.Second, time.Millisecond, func() (bool, string) {
			files := pieceFiles(n, pool.Name)
			return slices.ContainsFunc(files, ok), fmt.Sprintf("piece files %+v", files)
		})
	}
	var specToFile, restore []time.Duration
	for i := range runs {
		value := fmt.Sprintf("run-%d", i)
		began := time.Now()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := getPool(t, pool.Name)
			p.Spec.PlaceholderPod.Annotations = map[string]string{"bench.sandbox-pool.io/run": value}
			return admin.Update(ctx, p)
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor("spec change → manifest", func(f manifest.File) bool { return strings.Contains(string(f.Data), value) })
		specToFile = append(specToFile, time.Since(began))
		synced(t, n, pool.Name, "64Mi")
	}
	for range runs {
		files := pieceFiles(n, pool.Name)
		if len(files) != 1 {
			t.Fatalf("%d manifests, want 1", len(files))
		}
		if err := os.Remove(files[0].Path); err != nil {
			t.Fatal(err)
		}
		restore = append(restore, waitFor("deleted manifest's lock restored", func(f manifest.File) bool { return f.Path != files[0].Path }))
		synced(t, n, pool.Name, "64Mi")
	}
	synced(t, n, pool.Name, "64Mi")
	before, err := framework.ProcUsage(proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Second) // the idle period under observation
	after, err := framework.ProcUsage(proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := framework.ProcUsage(n.nc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE agent spec-change→manifest p50=%s p99=%s; manifest-deleted→restored p50=%s p99=%s (%d runs each)",
		framework.Percentile(specToFile, 50), framework.Percentile(specToFile, 99),
		framework.Percentile(restore, 50), framework.Percentile(restore, 99), runs)
	t.Logf("FIGURE agent idle 30s (poll 200ms, lease 1s): cpu=%.4f cores rss=%dMiB; node-ctl rss=%dMiB",
		after.CoresSince(before), after.RSSKiB/1024, nc.RSSKiB/1024)
}
