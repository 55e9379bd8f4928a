package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// idlePeriod is how long the healthy pools are watched for controller writes (the issue
// asks for 60 s).
const idlePeriod = 60 * time.Second

// TestIdleControllerWritesNothing: 50 healthy pools whose agents keep renewing their Leases
// for 60 s, after the class has summed their capacity. The controller writes nothing —
// the API server's audit log has no write request from the controller's identity in that
// window, neither to the pools nor to the class's status — and reconciles each pool about
// once per Lease TTL, not once per renewal. Then one pool's memory in use changes and the
// class's figures follow.
func TestIdleControllerWritesNothing(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	const class, n = "idle", 50
	var pools []string
	for i := range n {
		node := fmt.Sprintf("idle-%02d", i)
		createNode(t, node, map[string]string{selectorLabel: class})
		pools = append(pools, naming.PoolName(node))
	}
	if err := admin.Create(ctx, wrappers.MakeClass(class).Selector(selectorLabel, class).Resources("1", "1Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClassAndWait(t, class) })
	eventually(t, "50 pools", 30*time.Second, func() (bool, string) {
		got := len(poolsOfClass(t, class))
		return got == n, fmt.Sprint(got)
	})

	// The agents: renew every Lease each second (TTL 5 s), report the pod ready once.
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1 // no client-side throttling: 50 renewals a second
	agents, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	renewCtx, stopRenewing := context.WithCancel(ctx)
	var renewals sync.WaitGroup
	renewed := make(chan int, 1)
	renewals.Go(func() { renewed <- renewForever(renewCtx, t, agents, pools) })
	t.Cleanup(func() { stopRenewing(); renewals.Wait() })
	// Each agent reports a lock of 1 cpu and 1Gi, 100Mi in use, half the pools in each zone.
	for i, p := range pools {
		agentReportsWith(t, p, metav1.ConditionTrue, idleCapacity(i, 100<<20))
	}
	var c v1alpha1.SandboxPoolClass
	const wantCapacity = "50/50Gi/5000Mi/46200Mi zone-a 25 25/25Gi/2500Mi/23100Mi zone-b 25 25/25Gi/2500Mi/23100Mi"
	eventually(t, "all 50 pools Ready and summed in the class's capacity", 30*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, types.NamespacedName{Name: class}, &c)
		ready := 0
		for _, p := range poolsOfClass(t, class) {
			if p.Status.Phase == v1alpha1.PhaseReady {
				ready++
			}
		}
		got := capacityText(c.Status.Capacity)
		return ptr.Deref(c.Status.ReadySandboxPools, 0) == n && ready == n && got == wantCapacity,
			fmt.Sprintf("class counts %d Ready, %d pools Ready, capacity %s", ptr.Deref(c.Status.ReadySandboxPools, 0), ready, got)
	})

	from, before := time.Now(), reconciles(t)
	time.Sleep(idlePeriod) // the idle period under observation, not a synchronisation
	to, after := time.Now(), reconciles(t)
	stopRenewing()
	renewals.Wait()
	count := <-renewed

	events, err := framework.AuditEvents(suite.CP.AuditLog(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	var byController, leaseWrites int
	for _, e := range events {
		switch {
		case e.User.Username == controllerUser:
			byController++
			t.Errorf("controller write while idle: %s %s/%s %s/%s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Namespace, e.ObjectRef.Name)
		case e.ObjectRef.Resource == "leases":
			leaseWrites++
		}
	}
	t.Logf("idle %s: %d lease renewals in the audit log (%d sent), %.0f pool reconciles, %d controller writes",
		to.Sub(from).Round(time.Second), leaseWrites, count, after-before, byController)
	if leaseWrites == 0 || after-before < float64(n) {
		t.Errorf("the window saw %d lease writes and %.0f reconciles: the controller was not exercised", leaseWrites, after-before)
	}
	// Renewals of healthy pools are not reconciled one by one: each pool is reconciled
	// about once per TTL (5 s) while renewed every second.
	if after-before > float64(leaseWrites)/2 {
		t.Errorf("%.0f pool reconciles for %d lease renewals: the controller reconciles every renewal", after-before, leaseWrites)
	}

	// A pass over the class that finds its pools as they were writes nothing either (an
	// annotation on the class makes one; nothing at rest does).
	from, before = time.Now(), reconcilesOf(t, "sandboxpoolclass")
	for i := range 3 {
		updateClass(ctx, t, class, &c, func(c *v1alpha1.SandboxPoolClass) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, "sandbox.test/pass", fmt.Sprint(i))
		})
		eventually(t, "a class pass", 10*time.Second, func() (bool, string) {
			got := reconcilesOf(t, "sandboxpoolclass")
			return got > before+float64(i), fmt.Sprintf("%.0f class reconciles", got-before)
		})
	}
	if events, err = framework.AuditEvents(suite.CP.AuditLog(), from, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.User.Username == controllerUser {
			t.Errorf("controller write on a class pass with nothing changed: %s %s/%s %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Name)
		}
	}

	// One pool's sandboxes now use 612Mi: the class's figures follow.
	changed := time.Now()
	agentReportsWith(t, pools[0], metav1.ConditionTrue, idleCapacity(0, 612<<20))
	const wantAfter = "50/50Gi/5512Mi/45688Mi zone-a 25 25/25Gi/3012Mi/22588Mi zone-b 25 25/25Gi/2500Mi/23100Mi"
	eventually(t, "the class's capacity follows the pool's memory in use", 30*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, types.NamespacedName{Name: class}, &c)
		got := capacityText(c.Status.Capacity)
		return got == wantAfter, got
	})
	t.Logf("the class's capacity followed the pool's report %s after it", time.Since(changed).Round(time.Millisecond))
}

// idleCapacity is what the agent of the i-th idle pool reports: its lock of 1 cpu and 1Gi,
// node-ctl's 1Gi allocatable and the memory in use, in zone-a or zone-b.
func idleCapacity(i int, allocated int64) map[string]any {
	inUse := v1alpha1.MebibytesUp(allocated)
	return map[string]any{
		"capacity": map[string]any{"cpu": "1", "memory": "1Gi", "allocatedMemory": inUse.String()},
		"poolInfo": map[string]any{"zone": []string{"zone-a", "zone-b"}[i%2], "allocatableMemoryBytes": int64(1 << 30), "allocatedMemoryBytes": allocated},
	}
}

// capacityText renders a class's capacity as "cpu/memory/allocated/free", then each zone
// with its pool count and figures.
func capacityText(c *v1alpha1.ClassCapacity) string {
	if c == nil {
		return "none"
	}
	text := func(f v1alpha1.CapacityFigures) string {
		return fmt.Sprintf("%s/%s/%s/%s", f.CPU, f.Memory, f.AllocatedMemory, f.FreeMemory)
	}
	parts := []string{text(c.CapacityFigures)}
	for _, z := range c.Zones {
		parts = append(parts, fmt.Sprintf("%s %d %s", z.Zone, z.Pools, text(z.CapacityFigures)))
	}
	return strings.Join(parts, " ")
}

// renewForever renews every pool's Lease once a second, in the name of the pool's node as
// its agent does — each pool on its own, as each node's agent does — until ctx ends, and
// returns how many renewals it sent.
func renewForever(ctx context.Context, t *testing.T, c client.Client, pools []string) int {
	holders := map[string]string{} // it runs in goroutines of its own: no t.Fatal
	for _, p := range pools {
		var pool v1alpha1.SandboxPool
		if err := c.Get(ctx, types.NamespacedName{Name: p}, &pool); err != nil {
			t.Errorf("reading pool %s: %v", p, err)
			return 0
		}
		holders[p] = pool.Spec.NodeName
	}
	var sent atomic.Int64
	var agents sync.WaitGroup
	for _, p := range pools {
		node := holders[p]
		agents.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				now := metav1.NewMicroTime(time.Now())
				l := coordinationv1.Lease{}
				err := c.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: p}, &l)
				if err != nil {
					l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: p},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, RenewTime: &now}}
					err = c.Create(ctx, &l)
				} else {
					l.Spec.RenewTime = &now
					err = c.Update(ctx, &l)
				}
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Errorf("renewing lease %s: %v", p, err)
					return
				}
				sent.Add(1)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	agents.Wait()
	return int(sent.Load())
}
