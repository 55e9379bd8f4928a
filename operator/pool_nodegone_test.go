package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

func TestDecideNodeGone(t *testing.T) {
	const grace = 2 * time.Minute
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cond := func(typ v1alpha1.ConditionType, s metav1.ConditionStatus, at time.Time) metav1.Condition {
		return metav1.Condition{Type: typ.String(), Status: s, LastTransitionTime: metav1.NewTime(at)}
	}
	gone := cond(v1alpha1.ConditionNodeNotFound, metav1.ConditionTrue, t0)
	agentDown := cond(v1alpha1.ConditionPlaceholderAgentHealthy, metav1.ConditionFalse, t0.Add(-time.Hour))
	agentUp := cond(v1alpha1.ConditionPlaceholderAgentHealthy, metav1.ConditionTrue, t0.Add(-time.Hour))
	for _, tc := range []struct {
		name       string
		conds      []metav1.Condition
		now        time.Time
		wantDelete bool
		wantWait   time.Duration
	}{
		{"no NodeNotFound condition yet", []metav1.Condition{agentDown}, t0.Add(time.Hour), false, 0},
		{"node exists", []metav1.Condition{cond(v1alpha1.ConditionNodeNotFound, metav1.ConditionFalse, t0), agentDown}, t0.Add(time.Hour), false, 0},
		{"node just gone", []metav1.Condition{gone, agentDown}, t0, false, grace},
		{"a nanosecond before the deadline", []metav1.Condition{gone, agentDown}, t0.Add(grace - 1), false, 1},
		{"at the deadline", []metav1.Condition{gone, agentDown}, t0.Add(grace), true, 0},
		{"long after the deadline", []metav1.Condition{gone, agentDown}, t0.Add(24 * time.Hour), true, 0},
		{"no Lease condition yet, after the deadline", []metav1.Condition{gone}, t0.Add(grace), true, 0},
		{"agent still renewing before the deadline", []metav1.Condition{gone, agentUp}, t0.Add(time.Minute), false, time.Minute},
		{"agent still renewing after the deadline", []metav1.Condition{gone, agentUp}, t0.Add(time.Hour), false, 0},
	} {
		del, wait := decideNodeGone(tc.conds, tc.now, grace)
		if del != tc.wantDelete || wait != tc.wantWait {
			t.Errorf("%s: delete %v wait %s, want %v %s", tc.name, del, wait, tc.wantDelete, tc.wantWait)
		}
	}
}

// recordedEvent is one event the reconciler emitted.
type recordedEvent struct {
	regarding, related client.Object
	eventtype, reason  string
	note               string
}

// eventLog records events with the objects they are about (client-go's FakeRecorder keeps
// only their text).
type eventLog struct {
	mu     sync.Mutex // guards events
	events []recordedEvent
}

func (l *eventLog) Eventf(regarding, related runtime.Object, eventtype, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := recordedEvent{eventtype: eventtype, reason: reason, note: fmt.Sprintf(note, args...)}
	e.regarding, _ = regarding.(client.Object)
	e.related, _ = related.(client.Object)
	l.events = append(l.events, e)
}

func (l *eventLog) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (l *eventLog) withReason(reason string) []recordedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []recordedEvent
	for _, e := range l.events {
		if e.reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// nodeGoneFixture is a pool of class "a" on a node that does not exist, with an expired
// Lease, reconciled by a PoolReconciler on a fake clock.
type nodeGoneFixture struct {
	c      client.Client
	clock  *clocktesting.FakePassiveClock
	events *eventLog
	pool   types.NamespacedName
	lease  types.NamespacedName
}

const testGrace = 2 * time.Minute

func newNodeGoneFixture(t *testing.T, t0 time.Time) *nodeGoneFixture {
	t.Helper()
	sch, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	class := wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	class.UID = "class-a-uid"
	pool := newPool(class, "gone-node", testSnapshot("2"))
	pool.UID = "pool-uid"
	expired := metav1.NewMicroTime(t0.Add(-time.Hour))
	// Held in the node's name, as the agent renews it (a Lease of another holder is ignored).
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultLeaseNamespace, Name: pool.Name},
		Spec: coordinationv1.LeaseSpec{RenewTime: &expired, HolderIdentity: ptr.To(pool.Spec.NodeName)}}
	c := fake.NewClientBuilder().WithScheme(sch).WithObjects(class, pool, lease).
		WithStatusSubresource(&v1alpha1.SandboxPool{}).Build()
	return &nodeGoneFixture{
		c: c, clock: clocktesting.NewFakePassiveClock(t0), events: &eventLog{},
		pool:  types.NamespacedName{Name: pool.Name},
		lease: types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name},
	}
}

// reconciler is a fresh PoolReconciler, as after a controller restart: it remembers
// nothing but what the (fake) API shows.
func (f *nodeGoneFixture) reconciler() *PoolReconciler {
	return &PoolReconciler{
		Client: f.c, APIReader: f.c, Recorder: f.events, Clock: f.clock,
		LeaseNamespace: v1alpha1.DefaultLeaseNamespace, LeaseTTL: DefaultLeaseTTL,
		NodeCtlUnreadyAfter: time.Hour, NodeGoneGrace: testGrace,
	}
}

func (f *nodeGoneFixture) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.reconciler().Reconcile(context.Background(), ctrl.Request{NamespacedName: f.pool})
	if err != nil {
		t.Fatalf("reconcile at %s: %v", f.clock.Now().Format(time.RFC3339), err)
	}
	return res
}

func (f *nodeGoneFixture) poolState(t *testing.T) string {
	t.Helper()
	var p v1alpha1.SandboxPool
	err := f.c.Get(context.Background(), f.pool, &p)
	switch {
	case apierrors.IsNotFound(err):
		return "gone"
	case err != nil:
		t.Fatal(err)
	case p.DeletionTimestamp != nil:
		return "deleting"
	}
	return "present"
}

func (f *nodeGoneFixture) leaseExists(t *testing.T) bool {
	t.Helper()
	err := f.c.Get(context.Background(), f.lease, &coordinationv1.Lease{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestPoolOfGoneNodeDeletedAtDeadline: the pool of a node that is gone is kept until
// NodeNotFound has been True for the grace, requeued at that deadline (also by a restarted
// reconciler, which finds the same deadline in the pool's status), then deleted through its
// finalizer with its Lease, with a NodeGone event on its class and the counter incremented.
func TestPoolOfGoneNodeDeletedAtDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newNodeGoneFixture(t, t0)
	before := nodeGoneDeletedCount(t)

	if res := f.reconcile(t); res.RequeueAfter != testGrace {
		t.Errorf("first pass: requeue after %s, want the grace %s", res.RequeueAfter, testGrace)
	}
	f.clock.SetTime(t0.Add(testGrace - time.Second))
	if res := f.reconcile(t); res.RequeueAfter != time.Second {
		t.Errorf("a second before the deadline, restarted: requeue after %s, want 1s", res.RequeueAfter)
	}
	if s := f.poolState(t); s != "present" || !f.leaseExists(t) || len(f.events.withReason(EventReasonNodeGone)) > 0 {
		t.Fatalf("before the deadline: pool %s, lease %v, events %v; want nothing done", s, f.leaseExists(t), f.events.events)
	}

	f.clock.SetTime(t0.Add(testGrace))
	var stale v1alpha1.SandboxPool
	if err := f.c.Get(context.Background(), f.pool, &stale); err != nil {
		t.Fatal(err)
	}
	if res := f.reconcile(t); res.RequeueAfter != 0 {
		t.Errorf("at the deadline: requeue after %s, want none", res.RequeueAfter)
	}
	if s := f.poolState(t); s != "deleting" {
		t.Fatalf("at the deadline the pool is %s, want deleting (held by its finalizer)", s)
	}
	// A pass that reads the pool as it was before its deletion (a cache behind) deletes
	// nothing more.
	if deleted, _, err := f.reconciler().deleteIfNodeGone(context.Background(), &stale, stale.Status.Conditions, f.clock.Now()); err != nil || deleted {
		t.Errorf("a pass on the stale copy: deleted %v, err %v; want nothing done", deleted, err)
	}
	f.reconcile(t) // the finalizer's pass
	if s := f.poolState(t); s != "gone" {
		t.Errorf("after the finalizer's pass the pool is %s, want gone", s)
	}
	if f.leaseExists(t) {
		t.Error("the pool's Lease is still there")
	}
	evs := f.events.withReason(EventReasonNodeGone)
	if len(evs) != 1 {
		t.Fatalf("%d NodeGone events, want 1: %+v", len(evs), f.events.events)
	}
	e := evs[0]
	if e.eventtype != corev1.EventTypeNormal || e.regarding.GetObjectKind().GroupVersionKind().Kind != v1alpha1.KindSandboxPoolClass ||
		e.regarding.GetName() != "a" || e.related == nil || e.related.GetName() != f.pool.Name ||
		!strings.Contains(e.note, f.pool.Name) || !strings.Contains(e.note, "gone-node") || !strings.Contains(e.note, t0.Format(time.RFC3339)) {
		t.Errorf("event %+v: want Normal, on class a, related to the pool, naming the pool, the node and since when", e)
	}
	if got := nodeGoneDeletedCount(t) - before; got != 1 {
		t.Errorf("sandboxpool_node_gone_pools_deleted_total grew by %v, want 1", got)
	}
}

// TestPoolOfGoneNodeKept: a node back before the deadline, and an agent that still renews
// its Lease past it, keep the pool.
func TestPoolOfGoneNodeKept(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()

	t.Run("node back before the deadline", func(t *testing.T) {
		f := newNodeGoneFixture(t, t0)
		f.reconcile(t)
		f.clock.SetTime(t0.Add(testGrace - time.Second))
		if err := f.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone-node"}}); err != nil {
			t.Fatal(err)
		}
		f.reconcile(t)
		f.clock.SetTime(t0.Add(24 * time.Hour))
		if res := f.reconcile(t); res.RequeueAfter > 0 && res.RequeueAfter < time.Hour {
			t.Errorf("requeue after %s for a pool whose node exists", res.RequeueAfter)
		}
		if s := f.poolState(t); s != "present" || !f.leaseExists(t) || len(f.events.withReason(EventReasonNodeGone)) > 0 {
			t.Errorf("pool %s, lease %v, events %+v; want the pool and its Lease kept", s, f.leaseExists(t), f.events.events)
		}
	})

	t.Run("agent still renewing", func(t *testing.T) {
		f := newNodeGoneFixture(t, t0)
		f.reconcile(t)
		renew := func(at time.Time) {
			var l coordinationv1.Lease
			if err := f.c.Get(ctx, f.lease, &l); err != nil {
				t.Fatal(err)
			}
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at))
			if err := f.c.Update(ctx, &l); err != nil {
				t.Fatal(err)
			}
		}
		last := t0.Add(testGrace + time.Minute)
		renew(last)
		f.clock.SetTime(last.Add(time.Second))
		if res := f.reconcile(t); res.RequeueAfter != DefaultLeaseTTL-time.Second {
			t.Errorf("requeue after %s, want the Lease's expiry in %s", res.RequeueAfter, DefaultLeaseTTL-time.Second)
		}
		if s := f.poolState(t); s != "present" {
			t.Fatalf("pool %s while its agent renews; want present", s)
		}
		f.clock.SetTime(last.Add(DefaultLeaseTTL))
		f.reconcile(t)
		if s := f.poolState(t); s != "deleting" {
			t.Errorf("pool %s at the Lease's expiry, past the deadline; want deleting", s)
		}
	})
}

func nodeGoneDeletedCount(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := nodeGonePoolsDeleted.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
