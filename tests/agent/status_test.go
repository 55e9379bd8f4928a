package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestStatusRestoredAfterAnotherWriter: another writer clears fields the agent owns → the
// agent applies them again, though nothing it observes changed. A write that leaves its
// fields alone (metadata, the controller's phase) costs no status write.
func TestStatusRestoredAfterAnotherWriter(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "rewrite-node")
	n.startAgent()
	startKubelet(n)
	pool := syncedPool(t, n)

	before := statusWriteCount(t)
	wipe := []byte(`{"status":{"poolInfo":null,"placeholderPod":null,"nodeCtl":null}}`)
	if err := admin.Status().Patch(ctx, pool, client.RawPatch(types.MergePatchType, wipe)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent's fields back", 15*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		return p.Status.PoolInfo != nil && p.Status.PlaceholderPod != nil && p.Status.NodeCtl != nil, describe(p)
	})
	// The agent counts its write once the API server has answered it, which can be after
	// the fields are back for another reader.
	eventually(t, "the restoring write counted", 5*time.Second, func() (bool, string) {
		w := statusWriteCount(t) - before
		return w >= 1, fmt.Sprintf("%v status writes restored the fields, want at least 1", w)
	})

	// Foreign writes that leave the agent's fields as they are: an annotation and the
	// controller's phase. The agent re-runs its pass on each (and every second for the
	// manifest); over this observation period it must write nothing.
	before = statusWriteCount(t)
	if err := admin.Patch(ctx, pool, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test/touch":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := admin.Status().Patch(ctx, pool, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Ready"}}`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the observation period, not a synchronisation
	if w := statusWriteCount(t) - before; w != 0 {
		t.Errorf("%v status writes after writes that left the agent's fields alone, want 0", w)
	}
}

// statusWriteCount reads the agent's status write counter (sandboxpool_agent_status_writes_total).
func statusWriteCount(t *testing.T) float64 {
	t.Helper()
	mfs, err := gatherMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sandboxpool_agent_status_writes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal(fmt.Errorf("no sandboxpool_agent_status_writes_total"))
	return 0
}

// reconcileCount is how many passes the agents have run (controller-runtime's
// controller_runtime_reconcile_total for the controller placeholder-agent, every result).
func reconcileCount(t *testing.T) float64 {
	t.Helper()
	mfs, err := gatherMetrics()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "placeholder-agent" {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
