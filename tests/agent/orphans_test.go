package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/agentcube/sandboxpool/agent"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// writeManifest puts a manifest of a pool (name, UID) into dir, as an earlier agent would.
func writeManifest(t *testing.T, dir, pool, uid string) string {
	t.Helper()
	data, err := manifest.Render(manifest.Spec{PoolName: pool, PoolUID: uid, ClassName: "c1", NodeName: "orphan-node", Piece: 1,
		Resources: wrappers.Resources("1", "1Gi"),
		Template:  v1alpha1.PlaceholderPodTemplate{RuntimeClassName: "placeholder"}, Image: "pause"})
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, pool, 1, data); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, manifest.FileName(pool, 1))
}

// TestOrphanCleanupAtStart: at start the agent removes the manifests of pools that are gone
// or were recreated (another UID), keeps that of a pool that exists, and keeps everything
// when the API server cannot be asked.
func TestOrphanCleanupAtStart(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	existing := wrappers.MakePool("orphan-node").Class("c1").Resources("1", "1Gi").RuntimeClass("placeholder").Obj()
	if err := admin.Create(ctx, existing); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, existing) })
	dir := t.TempDir()
	keep := writeManifest(t, dir, existing.Name, string(existing.UID))
	gone := writeManifest(t, dir, "placeholder-deleted-node", "uid-of-a-deleted-pool")
	recreated := writeManifest(t, dir, "placeholder-recreated", "old-uid")
	recreatedPool := wrappers.MakePool("recreated").Class("c1").Resources("1", "1Gi").RuntimeClass("placeholder").Obj() // the same name, a new UID
	if err := admin.Create(ctx, recreatedPool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, recreatedPool) })

	run := func(cfg *rest.Config) {
		t.Helper()
		o := agent.DefaultOptions()
		o.NodeName, o.ManifestDir = "orphan-node", dir
		o.ShimAddress = filepath.Join(t.TempDir(), "a.sock")
		o.NodeCtlSocket, o.NodeCtlConfig = filepath.Join(dir, "none.sock"), filepath.Join(t.TempDir(), "nc.json")
		o.HealthzAddr, o.MetricsAddr = "0", "0"
		a, err := agent.New(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		// The cleanup runs first; a short run is enough to see it (with the API server
		// unreachable, Run then fails to build its manager).
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_ = a.Run(rctx)
	}

	// The API server unreachable (a closed port): every file stays.
	dead := rest.CopyConfig(cp.Config)
	dead.Host = "https://127.0.0.1:1"
	run(dead)
	for _, f := range []string{keep, gone, recreated} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s removed while the API server was unreachable: %v", filepath.Base(f), err)
		}
	}

	node, err := cp.AddUser("system:node:orphan-node", "system:nodes", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	run(node)
	for f, wantKept := range map[string]bool{keep: true, gone: false, recreated: false} {
		_, err := os.Stat(f)
		if kept := err == nil; kept != wantKept {
			t.Errorf("%s: kept %v, want %v (%v)", filepath.Base(f), kept, wantKept, err)
		}
	}
}

// TestHealthAndMetrics: /healthz, /readyz and /metrics on the agent's addresses.
func TestHealthAndMetrics(t *testing.T) {
	n := newNode(t, "health-node")
	health, metrics := support.FreeAddr(t), support.FreeAddr(t)
	n.startAgent(func(o *agent.Options) { o.HealthzAddr, o.MetricsAddr = health, metrics })
	eventually(t, "/healthz and /readyz answer 200", 20*time.Second, func() (bool, string) {
		h, _ := support.HTTPGet("http://" + health + "/healthz")
		r, _ := support.HTTPGet("http://" + health + "/readyz")
		return h == http.StatusOK && r == http.StatusOK, fmt.Sprintf("healthz %d readyz %d", h, r)
	})
	eventually(t, "/metrics has the agent's metrics", 20*time.Second, func() (bool, string) {
		code, body := support.HTTPGet("http://" + metrics + "/metrics")
		return code == http.StatusOK && strings.Contains(body, "sandboxpool_agent_nodectl_up 1"), fmt.Sprint(code)
	})
}
