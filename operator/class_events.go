package operator

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// poolEvents enqueues a pool's class when the pool is created or changes in a way the class
// counts or owns, and every class when a pool is deleted: a class that lost a node to
// another may take it now.
func (r *ClassReconciler) poolEvents() handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueueClass(q, e.Object.(*v1alpha1.SandboxPool).Spec.ClassRef.Name)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldPool, newPool := e.ObjectOld.(*v1alpha1.SandboxPool), e.ObjectNew.(*v1alpha1.SandboxPool)
			if poolChangeMattersToClass(oldPool, newPool) {
				enqueueClass(q, newPool.Spec.ClassRef.Name)
			}
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.enqueueClasses(ctx, q, func(*v1alpha1.SandboxPoolClass) bool { return true })
		},
	}
}

// priorityClassEvents enqueues the classes whose placeholderPod.priorityClassName names the
// PriorityClass.
func (r *ClassReconciler) priorityClassEvents() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.classRequests(ctx, func(c *v1alpha1.SandboxPoolClass) bool {
			return c.Spec.PlaceholderPod.PriorityClassName == o.GetName()
		})
	})
}

// nodeEvents enqueues the classes whose selection a node event changes: on create and
// delete the classes that select the node; on update only those that selected it before
// and not after, or after and not before. Status and heartbeat updates enqueue nothing.
func (r *ClassReconciler) nodeEvents() handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.enqueueClasses(ctx, q, matches(e.Object.GetLabels()))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if labels.Equals(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) {
				return // heartbeats and status: nothing a selector sees
			}
			before, after := matches(e.ObjectOld.GetLabels()), matches(e.ObjectNew.GetLabels())
			r.enqueueClasses(ctx, q, func(c *v1alpha1.SandboxPoolClass) bool { return before(c) != after(c) })
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.enqueueClasses(ctx, q, matches(e.Object.GetLabels()))
		},
	}
}

// poolChangeMattersToClass is true when a pool update changes what the class counts or owns:
// its phase, its capacity figures, a deferred resize, its agent's health, its spec, its
// labels, owner or finalizers, or its deletion.
func poolChangeMattersToClass(o, n *v1alpha1.SandboxPool) bool {
	return o.Status.Phase != n.Status.Phase || o.Generation != n.Generation || figuresOf(o) != figuresOf(n) ||
		resizeDeferred(o) != resizeDeferred(n) ||
		meta.IsStatusConditionFalse(o.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) !=
			meta.IsStatusConditionFalse(n.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		!labels.Equals(o.Labels, n.Labels) || len(o.Finalizers) != len(n.Finalizers) ||
		len(o.OwnerReferences) != len(n.OwnerReferences)
}

func resizeDeferred(p *v1alpha1.SandboxPool) bool {
	return p.Status.Resize.Status == v1alpha1.ResizeDeferred
}

func enqueueClass(q workqueue.TypedRateLimitingInterface[reconcile.Request], name string) {
	q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// matches returns whether a class's selector selects a node with these labels. An invalid
// selector selects nothing.
func matches(l map[string]string) func(*v1alpha1.SandboxPoolClass) bool {
	return func(c *v1alpha1.SandboxPoolClass) bool {
		sel, err := metav1.LabelSelectorAsSelector(c.Spec.Selector)
		return err == nil && sel.Matches(labels.Set(l))
	}
}

func (r *ClassReconciler) classRequests(ctx context.Context, pick func(*v1alpha1.SandboxPoolClass) bool) []reconcile.Request {
	var classes v1alpha1.SandboxPoolClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		logf.FromContext(ctx).Error(err, "listing classes for an event")
		return nil
	}
	var reqs []reconcile.Request
	for i := range classes.Items {
		if pick(&classes.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: classes.Items[i].Name}})
		}
	}
	return reqs
}

func (r *ClassReconciler) enqueueClasses(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], pick func(*v1alpha1.SandboxPoolClass) bool) {
	for _, req := range r.classRequests(ctx, pick) {
		q.Add(req)
	}
}
