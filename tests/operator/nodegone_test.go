package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestPoolOfGoneNodeDeleted: two nodes of a class are deleted. The pool of the one whose
// agent went with it (its Lease no longer renewed) shows NodeNotFound and Unready, and after
// the (shortened) --node-gone-grace is deleted through its finalizer, with its Lease and a
// NodeGone event on the class. The pool of the one whose agent keeps renewing is kept past
// the grace (the machine runs; only its Node object is gone) and is deleted once the
// renewals stop. The first node then registers again under the same name and gets a pool
// again through the class.
func TestPoolOfGoneNodeDeleted(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const class, quiet, renewing = "gone", "gone-quiet", "gone-renewing"
	labels := map[string]string{selectorLabel: class}
	createNode(t, quiet, labels)
	createNode(t, renewing, labels)
	if err := admin.Create(ctx, wrappers.MakeClass(class).Selector(selectorLabel, class).Resources("1", "1Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClassAndWait(t, class) })
	quietPool, renewingPool := naming.PoolName(quiet), naming.PoolName(renewing)
	eventually(t, "both pools", 10*time.Second, func() (bool, string) {
		n := len(poolsOfClass(t, class))
		return n == 2, fmt.Sprint(n)
	})
	for _, p := range []string{quietPool, renewingPool} {
		renewLease(t, p)
		agentReports(t, p, metav1.ConditionTrue)
		waitFor(t, p, p+" Ready", 10*time.Second,
			phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionFalse, "NodeExists"))
	}
	var quietUID types.UID
	{
		var p v1alpha1.SandboxPool
		if err := admin.Get(ctx, types.NamespacedName{Name: quietPool}, &p); err != nil {
			t.Fatal(err)
		}
		quietUID = p.UID
	}
	// Its mirror pod stays: no pod garbage collector runs here, as on a cluster where the
	// grace is shorter than its 40 s quarantine. Deleted before the class (cleanups run
	// last-registered first), so the class's deletion does not wait for it.
	pod := mirrorPod(t, quietPool, quiet)
	t.Cleanup(func() { deletePodNow(t, pod) })
	before := counter(t, "sandboxpool_node_gone_pools_deleted_total")

	// The agent of the second node keeps renewing, once a second.
	renewCtx, stopRenewing := context.WithCancel(ctx)
	var renewals sync.WaitGroup
	renewals.Go(func() { renewForever(renewCtx, t, admin, []string{renewingPool}) })
	t.Cleanup(func() { stopRenewing(); renewals.Wait() })

	deleted := time.Now()
	for _, n := range []string{quiet, renewing} {
		if err := admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{quietPool, renewingPool} {
		waitFor(t, p, p+": node deleted → Unready", 10*time.Second,
			phaseIs(v1alpha1.PhaseUnready, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionTrue, "NodeNotFound"))
	}

	eventually(t, "the quiet node's pool deleted", nodeGoneGrace+15*time.Second, func() (bool, string) {
		var p v1alpha1.SandboxPool
		err := admin.Get(ctx, types.NamespacedName{Name: quietPool}, &p)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v, deleting %v", err, p.DeletionTimestamp != nil)
	})
	held := time.Since(deleted)
	// The deadline is NodeNotFound's lastTransitionTime, kept at the API's one-second
	// precision, plus the grace.
	if held < nodeGoneGrace-time.Second {
		t.Errorf("the pool was deleted %s after its node, before the %s grace", held, nodeGoneGrace)
	}
	t.Logf("pool of the quiet node deleted %s after its node (grace %s)", held.Round(time.Millisecond), nodeGoneGrace)
	if err := admin.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: quietPool}, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the quiet node's Lease: %v, want NotFound", err)
	}
	eventually(t, "a NodeGone event on the class", 10*time.Second, func() (bool, string) {
		for _, e := range classEvents(t, v1alpha1.KindSandboxPoolClass, class, operator.EventReasonNodeGone) {
			if e.Type == corev1.EventTypeNormal && e.Related != nil && e.Related.Name == quietPool &&
				strings.Contains(e.Note, quietPool) && strings.Contains(e.Note, quiet) {
				return true, ""
			}
		}
		return false, "no NodeGone event about " + quietPool
	})

	// Past its deadline, the renewing node's pool stays while its agent renews.
	for end := deleted.Add(nodeGoneGrace + 3*time.Second); time.Now().Before(end); {
		var p v1alpha1.SandboxPool
		if err := admin.Get(ctx, types.NamespacedName{Name: renewingPool}, &p); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the pool of a node whose agent renews its Lease was deleted %s after the node: %v", time.Since(deleted), err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval of an observation window
	}
	stopRenewing()
	renewals.Wait()
	var lease coordinationv1.Lease
	if err := admin.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: renewingPool}, &lease); err != nil {
		t.Fatal(err)
	}
	lastRenewal := lease.Spec.RenewTime.Time
	eventually(t, "the renewing node's pool deleted once its Lease expires", leaseTTL+15*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: renewingPool}, &v1alpha1.SandboxPool{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if after := time.Since(lastRenewal); after < leaseTTL-500*time.Millisecond {
		t.Errorf("deleted %s after the last renewal, before the Lease expired (TTL %s)", after, leaseTTL)
	}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: renewingPool}, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the renewing node's Lease: %v, want NotFound", err)
	}
	if got := counter(t, "sandboxpool_node_gone_pools_deleted_total") - before; got != 2 {
		t.Errorf("sandboxpool_node_gone_pools_deleted_total grew by %v, want 2", got)
	}

	// The quiet node registers again under its name: the class gives it a new pool.
	createNode(t, quiet, labels)
	eventually(t, "a new pool for the returning node", 10*time.Second, func() (bool, string) {
		var p v1alpha1.SandboxPool
		err := admin.Get(ctx, types.NamespacedName{Name: quietPool}, &p)
		return err == nil && p.UID != quietUID && p.DeletionTimestamp == nil && p.Spec.ClassRef.Name == class,
			fmt.Sprintf("%v uid %s", err, p.UID)
	})
}

// counter is the value of one of the controller's unlabelled counters, from its registry.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
