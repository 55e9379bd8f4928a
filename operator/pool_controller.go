// Package operator is the SandboxPool controller (docs/design.md §3.4): the class fan-out and the
// per-pool phase aggregation, run by a controller-runtime manager (cmd/sandboxpool-controller).
package operator

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/agentcube/sandboxpool/internal/ssa"
	"github.com/agentcube/sandboxpool/operator/phase"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Defaults of the controller's flags.
const (
	DefaultLeaseTTL = 40 * time.Second
)

// PoolReconciler computes a pool's phase and owns its NodeNotFound and
// PlaceholderAgentHealthy conditions. It writes, with server-side apply as
// sandboxpool-controller, only when the phase or one of its conditions changes, and
// requeues at the moments the phase would change with time alone: the agent's Lease
// expiry and the node-ctl Unready boundary. It deletes the pool of a node that has been gone
// for NodeGoneGrace (pool_nodegone.go), and releases deleted pools (pool_finalizer.go).
type PoolReconciler struct {
	Client client.Client
	// APIReader reads from the API server directly (confirms a mirror pod is gone).
	APIReader           client.Reader
	Recorder            recorder.EventRecorder
	Clock               clock.PassiveClock
	LeaseNamespace      string
	LeaseTTL            time.Duration
	NodeCtlUnreadyAfter time.Duration
	// FinalizerTimeout is how long a deleted pool waits for its mirror pod
	// (DefaultFinalizerTimeout when 0).
	FinalizerTimeout time.Duration
	// NodeGoneGrace is how long a pool's node must have been gone before the pool is
	// deleted (DefaultNodeGoneGrace when 0; pool_nodegone.go).
	NodeGoneGrace time.Duration
	// MaxConcurrentReconciles is the number of pools reconciled at once.
	MaxConcurrentReconciles int
	// PodNamespace holds the placeholder pods' mirror pods (the agents' --pod-namespace).
	PodNamespace string

	// renewals is when the controller saw each pool's Lease renewed, by Clock.
	renewals leaseRenewals
}

// SetupWithManager registers the reconciler: pools, the Leases in LeaseNamespace (by name),
// the creation and deletion of Nodes (node updates, mostly heartbeats, are ignored; nodes are
// watched as metadata only), and the mirror pods of the placeholder pods in PodNamespace (by
// their pool-name label), whose disappearance releases a deleted pool.
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: naming.PoolName(o.GetName())}}}
	})
	byPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if pool := r.poolOfMirrorPod(o); pool != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
		}
		return nil
	})
	nodeExistence := predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
	podGone := predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxpool").
		For(&v1alpha1.SandboxPool{}).
		Watches(&coordinationv1.Lease{}, r.leaseEvents()).
		Watches(&corev1.Node{}, byNode, builder.WithPredicates(nodeExistence), builder.OnlyMetadata).
		Watches(&corev1.Pod{}, byPod, builder.WithPredicates(podGone)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool v1alpha1.SandboxPool
	if err := r.Client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := logf.FromContext(ctx).WithValues("pool", pool.Name, "node", pool.Spec.NodeName)
	ctx = logf.IntoContext(ctx, log)
	if pool.DeletionTimestamp != nil {
		wait, err := r.finalize(ctx, &pool)
		return ctrl.Result{RequeueAfter: wait}, err
	}
	now := r.Clock.Now()

	nodeCond, err := r.nodeCondition(ctx, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	agentCond, leaseExpiresIn, err := r.agentCondition(ctx, &pool, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait := r.newPoolGrace(&pool, nodeCond, agentCond, now); wait > 0 {
		// A new pool its agent has not reported yet: the agent has a Lease TTL to do so, as
		// it has to renew its Lease, before the controller writes anything. The agent's
		// report brings the pool back.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if agentCond.Reason == v1alpha1.ReasonLeaseHolderMismatch.String() {
		if was := meta.FindStatusCondition(pool.Status.Conditions, agentCond.Type); was == nil || was.Message != agentCond.Message {
			r.Recorder.Eventf(&pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonLeaseHolderMismatch.String(), ActionIgnoreLease, "%s", agentCond.Message)
		}
	}
	conds := append([]metav1.Condition(nil), pool.Status.Conditions...)
	meta.SetStatusCondition(&conds, nodeCond)
	meta.SetStatusCondition(&conds, agentCond)

	var downSince *metav1.Time
	if pool.Status.NodeCtl != nil {
		downSince = pool.Status.NodeCtl.DownSince
	}
	// A pool was ever Ready when it is Ready now (only this controller writes the phase) or
	// its marker says so. The marker is written as the pool first leaves Ready, before the
	// phase that says it left: a pool that becomes Ready and stays so costs no write for it.
	marked := pool.Annotations[v1alpha1.AnnotationEverReady] == "true"
	everReady := marked || pool.Status.Phase == v1alpha1.PhaseReady
	res := phase.Compute(phase.Input{
		Conditions: conds, NodeCtlDownSince: downSince, EverReady: everReady,
		Now: now, NodeCtlUnreadyAfter: r.NodeCtlUnreadyAfter,
	})

	if res.EverReady && !marked && res.Phase != v1alpha1.PhaseReady {
		// Marked once, as an annotation: the controller owns only the phase and two
		// conditions in status.
		if err := ssa.ApplyAnnotations(ctx, r.Client, &pool, map[string]string{v1alpha1.AnnotationEverReady: "true"},
			v1alpha1.FieldManagerController); err != nil {
			return ctrl.Result{}, err
		}
	}
	// Applied without force: a conflict is an error and the next reconcile retries
	// (docs/design.md §4).
	if have, want := controllerStatus(pool.Status.Phase, pool.Status.Conditions), controllerStatus(res.Phase, conds); ssa.StatusChanged(&have, &want) {
		log.V(1).Info("phase", "phase", res.Phase, "rule", res.Rule, "reason", res.Reason)
		if err := ssa.ApplyStatus(ctx, r.Client, &pool, &want, v1alpha1.FieldManagerController); err != nil {
			return ctrl.Result{}, err
		}
	}
	deleted, goneDeadlineIn, err := r.deleteIfNodeGone(ctx, &pool, conds, now)
	if err != nil || deleted {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: soonest(res.RequeueAfter, leaseExpiresIn, goneDeadlineIn)}, nil
}

// leaseEvents handles the events of the agents' Leases. Each one is first recorded as the
// controller saw it (leaseRenewals), at the moment it arrives. A renewal of a healthy pool's
// Lease changes nothing now: the reconcile that saw the pool healthy requeued it for the
// Lease's expiry, and that pass reads when the controller last saw it renewed. Only a
// renewal that may end an outage (the pool not healthy) is handled at once. At rest this is
// one reconcile per pool per TTL instead of one per renewal. A change of holder is handled
// at once too: a Lease taken over by another identity no longer counts for the pool's node.
func (r *PoolReconciler) leaseEvents() handler.Funcs {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if o.GetNamespace() == r.LeaseNamespace {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: o.GetName()}})
		}
	}
	see := func(o client.Object) {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Namespace == r.LeaseNamespace {
			r.renewals.observe(l, r.Clock.Now(), r.LeaseTTL)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.Object)
			enqueue(e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.ObjectNew)
			if holderOf(e.ObjectOld) != holderOf(e.ObjectNew) || !r.agentHealthy(ctx, e.ObjectNew.GetName()) {
				enqueue(e.ObjectNew, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.GetNamespace() == r.LeaseNamespace {
				r.renewals.forget(e.Object.GetName())
			}
			enqueue(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}

// newPoolGrace is how long the controller leaves a new pool's status unwritten: while the
// pool is younger than the Lease TTL, its node exists, and neither its agent nor the
// controller has written any condition, with its Lease not there yet or renewed by its node,
// the agent is on its way (as a Lease renewed less than a TTL ago says it is alive), and the
// pool would only be shown Pending. Its first status then comes with the agent's report, in
// one write. 0 means write now.
func (r *PoolReconciler) newPoolGrace(pool *v1alpha1.SandboxPool, nodeCond, agentCond metav1.Condition, now time.Time) time.Duration {
	switch {
	case nodeCond.Status != metav1.ConditionFalse,
		agentCond.Reason != v1alpha1.ReasonLeaseNotFound.String() && agentCond.Reason != v1alpha1.ReasonLeaseRenewed.String(),
		len(pool.Status.Conditions) > 0:
		return 0
	}
	return pool.CreationTimestamp.Add(r.LeaseTTL).Sub(now)
}

// agentHealthy reports whether the cache shows pool with PlaceholderAgentHealthy=True.
func (r *PoolReconciler) agentHealthy(ctx context.Context, pool string) bool {
	var p v1alpha1.SandboxPool
	if err := r.Client.Get(ctx, types.NamespacedName{Name: pool}, &p); err != nil {
		return false
	}
	return meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String())
}

// controllerStatus is the part of a pool's status the controller owns: the phase and its
// conditions (docs/design.md §4).
func controllerStatus(p v1alpha1.SandboxPoolPhase, conds []metav1.Condition) v1alpha1.SandboxPoolStatus {
	st := v1alpha1.SandboxPoolStatus{Phase: p}
	for _, t := range v1alpha1.ControllerConditions {
		if c := meta.FindStatusCondition(conds, t.String()); c != nil {
			st.Conditions = append(st.Conditions, *c)
		}
	}
	return st
}

// soonest is the smallest positive duration, or 0.
func soonest(ds ...time.Duration) time.Duration {
	var first time.Duration
	for _, d := range ds {
		if d > 0 && (first == 0 || d < first) {
			first = d
		}
	}
	return first
}
