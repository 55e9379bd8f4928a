package hollow

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
)

func TestNodeCtl(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "node-ctl.json")
	n := NewNodeCtl(path, "zone-a")

	if _, err := n.Reload(ctx); !errors.Is(err, nodectl.ErrRejected) {
		t.Fatalf("reload without a config: got %v, want a rejection", err)
	}
	cfg := api.Config{Pool: api.PoolRef{Name: "placeholder-n", UID: "u1"}, Generation: 3,
		Resources: map[string]string{"cpu": "500m", "memory": "256Mi"}}
	if err := nodectl.WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := n.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.AppliedGeneration != 3 || st.Pool.UID != "u1" || st.AllocatableMemoryBytes != 256<<20 || st.Zone != "zone-a" || !st.Applied() {
		t.Errorf("state after reload: %+v", st)
	}
	if gen, res := n.Applied(); gen != 3 || res["cpu"] != "500m" {
		t.Errorf("Applied() = %d, %v", gen, res)
	}

	n.SetDown(true)
	if _, err := n.Health(ctx); err == nil {
		t.Error("a stopped node-ctl answered Health")
	}
	if _, err := n.State(ctx); err == nil {
		t.Error("a stopped node-ctl answered State")
	}
	n.SetDown(false)
	if h, err := n.Health(ctx); err != nil || h.Status != api.HealthOK {
		t.Errorf("Health after restart: %v, %v", h, err)
	}
	if st, err := n.State(ctx); err != nil || st.AppliedGeneration != 3 {
		t.Errorf("State after restart keeps the applied config: %+v, %v", st, err)
	}
}
