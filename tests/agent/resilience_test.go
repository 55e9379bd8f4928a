package agent

import (
	"context"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// TestIdleAgent: a healthy pool for 60 s. The API server's audit log shows one Lease
// renewal per --lease-renew-interval from the node's Lease identity and no status write.
func TestIdleAgent(t *testing.T) {
	n := newNode(t, "idle-node")
	n.startAgent()
	startKubelet(n)
	pool := syncedPool(t, n)

	const idle, interval = 60 * time.Second, time.Second // interval: the test's --lease-renew-interval
	from := time.Now()
	time.Sleep(idle) // the idle period under observation, not a synchronisation
	to := time.Now()
	events, err := framework.AuditEvents(suite.CP.AuditLog(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	renewals, statusWrites, other := 0, 0, 0
	for _, e := range events {
		if e.User.Username != nodeUser(n.name) && e.User.Username != leaseUser(n.name) {
			continue
		}
		switch {
		case e.ObjectRef.Resource == "leases" && e.ObjectRef.Name == pool.Name && e.Verb == "update" && e.User.Username == leaseUser(n.name):
			renewals++
		case e.ObjectRef.Resource == v1alpha1.ResourceSandboxPools && e.ObjectRef.Subresource == "status":
			statusWrites++
		default:
			other++
			t.Errorf("unexpected write while idle: %s %s/%s %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Name)
		}
	}
	want := int(idle / interval)
	t.Logf("idle %s: %d lease renewals (one per %s: %d), %d status writes, %d other writes", to.Sub(from).Round(time.Second), renewals, interval, want, statusWrites, other)
	if renewals < want-1 || renewals > want+1 {
		t.Errorf("%d lease renewals in %s, want one per %s (%d ± 1)", renewals, idle, interval, want)
	}
	if statusWrites != 0 {
		t.Errorf("%d status writes while idle, want 0", statusWrites)
	}
}

// TestAPIServerOutage: the API server is killed for 30 s and started again. Nothing is
// removed from the node, the agent reconnects on its own, and the status catches up with what
// changed meanwhile (node-ctl went down during the outage).
func TestAPIServerOutage(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	n := newNode(t, "outage-node")
	n.startAgent()
	startKubelet(n)
	pool := syncedPool(t, n)
	data := diskState(n, pool.Name)

	restart, err := cp.KillAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	n.nc.Kill() // something for the status to catch up with
	// 30 s without the API server: the manifests stay, byte for byte, and so does the agent.
	for time.Since(stopped) < 30*time.Second {
		if got := diskState(n, pool.Name); !maps.Equal(got, data) {
			t.Fatalf("the manifests changed or went during the outage: %d files, was %d", len(got), len(data))
		}
		select {
		case err := <-n.done:
			t.Fatalf("the agent exited during the outage: %v", err)
		case <-time.After(500 * time.Millisecond): // the outage under observation
		}
	}
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	eventually(t, "status caught up: NodeCtlHealthy=False with downSince", 60*time.Second, func() (bool, string) {
		var p v1alpha1.SandboxPool
		if err := admin.Get(ctx, types.NamespacedName{Name: pool.Name}, &p); err != nil {
			return false, err.Error()
		}
		return condIs(&p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionFalse) && p.Status.NodeCtl != nil &&
			p.Status.NodeCtl.DownSince != nil && p.Status.NodeCtl.DownSince.Time.Before(restarted), describe(&p)
	})
	t.Logf("status caught up %s after the API server came back", time.Since(restarted).Round(time.Millisecond))
	n.nc.Start()
	synced(t, n, pool.Name, "64Mi")
	if got := diskState(n, pool.Name); !maps.Equal(got, data) {
		t.Errorf("the manifests changed across the outage")
	}
	// The agent's watches come back on their own (client-go's reflectors back off to at most
	// 30 s while the API server is gone): a spec change reaches the manifest and node-ctl.
	setMemory(t, pool.Name, "96Mi")
	changed := time.Now()
	eventually(t, "the spec change after the outage reaches the manifests", 90*time.Second, func() (bool, string) {
		l := diskLock(n, pool.Name)
		return memOf(l) == "96Mi", memOf(l)
	})
	t.Logf("a spec change reached the manifest %s after it was made, %s after the API server came back",
		time.Since(changed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	synced(t, n, pool.Name, "96Mi")
}
