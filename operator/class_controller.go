package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// DefaultBurstCreates caps the pool creates of one class reconcile; the rest follow on the
// next pass (the DaemonSet controller's BurstReplicas).
const DefaultBurstCreates = 250

// continueFanOutAfter is when a class whose creates hit the burst cap is reconciled again.
const continueFanOutAfter = 10 * time.Millisecond

// indexPoolClass indexes SandboxPools by their class in the manager's cache.
const indexPoolClass = "spec.classRef.name"

// ClassReconciler fans a SandboxPoolClass out to one SandboxPool per matching node
// (docs/design.md §3.4): creates in slow-start batches, keeps every snapshot equal to the
// class's policy, deletes the pools of nodes that stop matching, and keeps the class's
// status counts and its NodeConflict and PoolsSynced conditions.
//
// A pass decides with planClass (class_plan.go, no I/O) and acts in sync (class_sync.go);
// the status (class_status.go) and the finalizer (class_finalizer.go) follow. The events it
// reconciles on are in class_events.go, what it remembers of each class in class_state.go.
type ClassReconciler struct {
	Client client.Client
	// APIReader reads from the API server directly: after a failed create, the cache may not
	// have the pool that beat us yet.
	APIReader client.Reader
	Schema    *schema.Schema
	Recorder  recorder.EventRecorder
	Clock     clock.PassiveClock
	// BurstCreates caps the creates of one reconcile (DefaultBurstCreates when 0).
	BurstCreates int
	// MaxConcurrentReconciles is the number of classes reconciled at once.
	MaxConcurrentReconciles int

	// classes is what the reconciler remembers of each class between passes.
	classes classStates
}

// IndexPools registers the cache index the class reconciler lists pools by.
func IndexPools(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.SandboxPool{}, indexPoolClass, func(o client.Object) []string {
		return []string{o.(*v1alpha1.SandboxPool).Spec.ClassRef.Name}
	})
}

// SetupWithManager registers the reconciler. It watches classes; pools (by class, and on
// deletion every class, so a class that lost a node to another may take it); PriorityClasses
// a class names; and nodes, but only for events that change whether a node matches a class.
// Nodes are watched as metadata only: labels are all a selector needs.
func (r *ClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxpoolclass").
		For(&v1alpha1.SandboxPoolClass{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetDeletionTimestamp() != nil
			}}))).
		Watches(&v1alpha1.SandboxPool{}, r.poolEvents()).
		Watches(&corev1.Node{}, r.nodeEvents(), builder.OnlyMetadata).
		Watches(&schedulingv1.PriorityClass{}, r.priorityClassEvents()).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *ClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var class v1alpha1.SandboxPoolClass
	if err := r.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.classes.forget(req.Name)
			forgetClassMetrics(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithValues("class", class.Name))

	var pools v1alpha1.SandboxPoolList
	if err := r.Client.List(ctx, &pools, client.MatchingFields{indexPoolClass: class.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing pools of class %s: %w", class.Name, err)
	}
	ours := make([]*v1alpha1.SandboxPool, len(pools.Items))
	for i := range pools.Items {
		ours[i] = &pools.Items[i]
	}

	if class.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalizeClass(ctx, &class, ours)
	}
	if err := r.ensureFinalizer(ctx, &class); err != nil {
		return ctrl.Result{}, err
	}

	res, syncErr := r.sync(ctx, &class, ours)
	if err := r.updateStatus(ctx, &class, ours, res, syncErr); err != nil {
		return ctrl.Result{}, errors.Join(syncErr, err)
	}
	if syncErr != nil && !res.permanent {
		return ctrl.Result{}, syncErr
	}
	if res.more {
		// Continue soon, outside the failure backoff (Requeue: true would grow the delay
		// with every pass of a large fan-out).
		return ctrl.Result{RequeueAfter: continueFanOutAfter}, nil
	}
	return ctrl.Result{RequeueAfter: res.recheck}, nil
}

// burst is the most pools one pass creates.
func (r *ClassReconciler) burst() int {
	if r.BurstCreates <= 0 {
		return DefaultBurstCreates
	}
	return r.BurstCreates
}
