// Package operator is the SandboxPool controller (docs/design.md §3.4): the class fan-out and the
// per-pool phase aggregation, run by a controller-runtime manager (cmd/sandboxpool-controller).
package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/agentcube/sandboxpool/internal/ssa"
	"github.com/agentcube/sandboxpool/operator/phase"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
}

// SetupWithManager registers the reconciler: pools, the Leases in LeaseNamespace (by name),
// the creation and deletion of Nodes (node updates, mostly heartbeats, are ignored; nodes are
// watched as metadata only), and placeholder pods (by their pool-name label), whose
// disappearance releases a deleted pool.
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byLease := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != r.LeaseNamespace {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	byNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: naming.PoolName(o.GetName())}}}
	})
	byPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if pool := poolOfPod(o); pool != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
		}
		return nil
	})
	// A renewal of a healthy pool's Lease changes nothing now: the reconcile that saw the
	// pool healthy requeued it for the Lease's expiry, and that pass reads the newest
	// renewal. Only a renewal that may end an outage (the pool not healthy) is handled at
	// once. At rest this is one reconcile per pool per TTL instead of one per renewal.
	// A change of holder is handled at once too: a Lease taken over by another identity no
	// longer counts for the pool's node.
	leaseMayRecover := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return holderOf(e.ObjectOld) != holderOf(e.ObjectNew) || !r.agentHealthy(context.Background(), e.ObjectNew.GetName())
	}}
	nodeExistence := predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
	podGone := predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxpool").
		For(&v1alpha1.SandboxPool{}).
		Watches(&coordinationv1.Lease{}, byLease, builder.WithPredicates(leaseMayRecover)).
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
	everReady := pool.Annotations[v1alpha1.AnnotationEverReady] == "true"
	res := phase.Compute(phase.Input{
		Conditions: conds, NodeCtlDownSince: downSince, EverReady: everReady,
		Now: now, NodeCtlUnreadyAfter: r.NodeCtlUnreadyAfter,
	})

	if res.EverReady && !everReady {
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

func (r *PoolReconciler) nodeCondition(ctx context.Context, pool *v1alpha1.SandboxPool) (metav1.Condition, error) {
	// The transition time comes from the controller's clock, at the API's precision (the
	// node-gone deadline is computed from it, before and after it is written).
	c := metav1.Condition{Type: v1alpha1.ConditionNodeNotFound.String(), ObservedGeneration: pool.Generation,
		LastTransitionTime: metav1.NewTime(r.Clock.Now()).Rfc3339Copy()}
	exists, err := r.nodeExists(ctx, pool.Spec.NodeName)
	switch {
	case err != nil:
		return c, err
	case exists:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonNodeExists.String(), fmt.Sprintf("node %s exists", pool.Spec.NodeName)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonNodeNotFound.String(), fmt.Sprintf("node %s does not exist", pool.Spec.NodeName)
	}
	return c, nil
}

// nodeExists reads the node from the metadata-only cache.
func (r *PoolReconciler) nodeExists(ctx context.Context, name string) (bool, error) {
	return nodeExistsIn(ctx, r.Client, name)
}

// agentCondition reads the agent's Lease. Only a Lease held by the pool's node counts: the
// API server's Lease policy (deploy/rbac/node-policy.yaml) lets a node write its own pool's
// Lease only and in its own name, and a Lease held by anyone else (the policy is missing, or
// two long node names share their first 232 characters) is ignored, with a Warning event.
// Messages carry no changing timestamps, so a renewal alone never causes a write.
// leaseExpiresIn > 0 while the lease is fresh.
func (r *PoolReconciler) agentCondition(ctx context.Context, pool *v1alpha1.SandboxPool, now time.Time) (metav1.Condition, time.Duration, error) {
	c := metav1.Condition{Type: v1alpha1.ConditionPlaceholderAgentHealthy.String(), ObservedGeneration: pool.Generation}
	var lease coordinationv1.Lease
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.LeaseNamespace, Name: pool.Name}, &lease)
	if apierrors.IsNotFound(err) {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonLeaseNotFound.String()
		c.Message = fmt.Sprintf("no lease %s/%s: the placeholder agent has not reported", r.LeaseNamespace, pool.Name)
		return c, 0, nil
	}
	if err != nil {
		return c, 0, fmt.Errorf("getting lease %s/%s: %w", r.LeaseNamespace, pool.Name, err)
	}
	if holder := holderOf(&lease); holder != pool.Spec.NodeName {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonLeaseHolderMismatch.String()
		c.Message = fmt.Sprintf("lease %s/%s is held by %q, not by node %s: ignored", r.LeaseNamespace, pool.Name, holder, pool.Spec.NodeName)
		return c, 0, nil
	}
	var renewed time.Time
	switch {
	case lease.Spec.RenewTime != nil:
		renewed = lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		renewed = lease.Spec.AcquireTime.Time
	}
	if left := renewed.Add(r.LeaseTTL).Sub(now); left > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonLeaseRenewed.String()
		c.Message = fmt.Sprintf("lease renewed within the last %s", r.LeaseTTL)
		return c, left, nil
	}
	c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired.String()
	c.Message = fmt.Sprintf("lease not renewed since %s (TTL %s)", renewed.UTC().Format(time.RFC3339), r.LeaseTTL)
	return c, 0, nil
}

// holderOf is the spec.holderIdentity of a Lease ("" when unset or not a Lease).
func holderOf(o client.Object) string {
	if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
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
	var min time.Duration
	for _, d := range ds {
		if d > 0 && (min == 0 || d < min) {
			min = d
		}
	}
	return min
}
