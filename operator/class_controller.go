package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentcube/sandboxpool/internal/ssa"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// DefaultBurstCreates caps the pool creates of one class reconcile; the rest follow on the
// next pass (the DaemonSet controller's BurstReplicas).
const DefaultBurstCreates = 250

// maxConflictsInMessage bounds the NodeConflict condition message.
const maxConflictsInMessage = 5

// Index fields of SandboxPools in the manager's cache.
const (
	indexPoolClass = "spec.classRef.name"
)

// ClassReconciler fans a SandboxPoolClass out to one SandboxPool per matching node (docs/design.md
// §3.4): creates in slow-start batches, keeps every snapshot equal to the class's policy,
// deletes the pools of nodes that stop matching, and keeps the class's status counts and
// its NodeConflict and PoolsSynced conditions.
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

	mu sync.Mutex // guards the maps below
	// fanoutSince is when a class's current generation was first seen out of sync.
	fanoutSince map[string]fanoutStart
	// conflicted is the set of conflicting nodes last reported per class, so an event is
	// emitted once per new conflict rather than on every pass.
	conflicted map[string]map[string]bool
	// firstBatch is the batch a class's next creates start with: 1 after an error (or at
	// first), else twice the last batch that fully succeeded, up to the burst cap. A fan-out
	// larger than the cap so does not restart its slow start at 1 every pass.
	firstBatch map[string]int
}

type fanoutStart struct {
	generation int64
	at         time.Time
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
	poolEvents := handler.Funcs{
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
	byPriorityClass := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.classRequests(ctx, func(c *v1alpha1.SandboxPoolClass) bool {
			return c.Spec.PlaceholderPod.PriorityClassName == o.GetName()
		})
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxpoolclass").
		For(&v1alpha1.SandboxPoolClass{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetDeletionTimestamp() != nil
			}}))).
		Watches(&v1alpha1.SandboxPool{}, poolEvents).
		Watches(&corev1.Node{}, r.nodeEvents(), builder.OnlyMetadata).
		Watches(&schedulingv1.PriorityClass{}, byPriorityClass).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
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
// its phase, a deferred resize, its agent's health, its spec, its labels, owner or
// finalizers, or its deletion.
func poolChangeMattersToClass(o, n *v1alpha1.SandboxPool) bool {
	return o.Status.Phase != n.Status.Phase || o.Generation != n.Generation ||
		resizeDeferred(o) != resizeDeferred(n) ||
		meta.IsStatusConditionFalse(o.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) !=
			meta.IsStatusConditionFalse(n.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		!labels.Equals(o.Labels, n.Labels) || len(o.Finalizers) != len(n.Finalizers) ||
		len(o.OwnerReferences) != len(n.OwnerReferences)
}

func resizeDeferred(p *v1alpha1.SandboxPool) bool {
	return p.Status.Resize != nil && p.Status.Resize.Status == v1alpha1.ResizeDeferred
}

func enqueueClass(q workqueue.TypedRateLimitingInterface[reconcile.Request], name string) {
	q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// matches returns whether a class's selector selects a node with these labels. An invalid
// selector selects nothing.
func matches(l map[string]string) func(*v1alpha1.SandboxPoolClass) bool {
	return func(c *v1alpha1.SandboxPoolClass) bool {
		sel, err := metav1.LabelSelectorAsSelector(&c.Spec.Selector)
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

// Reconcile implements reconcile.Reconciler.
func (r *ClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var class v1alpha1.SandboxPoolClass
	if err := r.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
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
	if !controllerutil.ContainsFinalizer(&class, v1alpha1.FinalizerClassPools) {
		orig := class.DeepCopy()
		controllerutil.AddFinalizer(&class, v1alpha1.FinalizerClassPools)
		if err := r.Client.Patch(ctx, &class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(v1alpha1.FieldManagerController)); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to class %s: %w", class.Name, err)
		}
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
	return ctrl.Result{}, nil
}

// continueFanOutAfter is when a class whose creates hit the burst cap is reconciled again.
const continueFanOutAfter = 10 * time.Millisecond

// updateWorkers is how many snapshot updates run at once. One at a time, a policy change
// took N round trips end to end: 43 s for 200 nodes while the agents rebuilt their pods
// (tests/scale, make bench-scale).
const updateWorkers = 32

// updatePools patches the pools' snapshots to want, updateWorkers at a time, and returns
// every error.
func (r *ClassReconciler) updatePools(ctx context.Context, ours []*v1alpha1.SandboxPool, update []*v1alpha1.SandboxPool) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	byName := make(map[string]*v1alpha1.SandboxPool, len(ours))
	for _, p := range ours {
		byName[p.Name] = p
	}
	next := make(chan *v1alpha1.SandboxPool)
	for range min(updateWorkers, len(update)) {
		wg.Go(func() {
			for want := range next {
				if err := r.Client.Patch(ctx, want, poolPatch(byName[want.Name], want),
					client.FieldOwner(v1alpha1.FieldManagerController)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("updating pool %s: %w", want.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, want := range update {
		next <- want
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// syncResult is what one sync pass did and found.
type syncResult struct {
	plan classPlan
	// more is true when the burst cap left creates for the next pass.
	more bool
	// permanent marks a syncErr that retrying cannot fix (the class must change first).
	permanent bool
	reason    v1alpha1.ConditionReason
}

// sync makes the class's pools match its selector and policy.
func (r *ClassReconciler) sync(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool) (syncResult, error) {
	log := logf.FromContext(ctx)
	sel, err := metav1.LabelSelectorAsSelector(&class.Spec.Selector)
	if err != nil {
		return syncResult{permanent: true, reason: v1alpha1.ReasonInvalidSelector}, fmt.Errorf("spec.selector: %w", err)
	}
	snap, err := buildSnapshot(ctx, r.Client, r.Schema, class)
	if err != nil {
		if errors.Is(err, errPriorityClassNotFound) {
			// The PriorityClass watch brings the class back when it appears.
			return syncResult{permanent: true, reason: v1alpha1.ReasonPriorityClassNotFound}, err
		}
		return syncResult{reason: v1alpha1.ReasonSyncFailed}, err
	}
	nodes, err := r.nodes(ctx)
	if err != nil {
		return syncResult{reason: v1alpha1.ReasonSyncFailed}, err
	}
	plan := planClass(planInput{
		Class: class, Selector: sel, Snapshot: snap, Nodes: nodes, Pools: ours,
		PoolOfNode: func(node string) *v1alpha1.SandboxPool {
			var p v1alpha1.SandboxPool
			if err := r.Client.Get(ctx, types.NamespacedName{Name: naming.PoolName(node)}, &p); err != nil {
				return nil
			}
			return &p
		},
	})
	res := syncResult{plan: plan}
	r.noteFanout(class, len(plan.create)+len(plan.update)+len(plan.remove) > 0)

	var errs []error
	burst := r.BurstCreates
	if burst <= 0 {
		burst = DefaultBurstCreates
	}
	create := plan.create
	if len(create) > burst {
		create, res.more = create[:burst], true
	}
	if len(create) > 0 {
		created, conflicts, err := r.createPools(ctx, class, create, snap)
		res.plan.conflicts = append(res.plan.conflicts, conflicts...)
		if created > 0 {
			log.Info("created pools", "count", created)
			r.Recorder.Eventf(class, nil, corev1.EventTypeNormal, EventReasonSuccessfulCreate, ActionCreatePool, "Created %d pools", created)
		}
		errs = append(errs, err)
	}
	errs = append(errs, r.updatePools(ctx, ours, plan.update))
	if n := len(plan.update); n > 0 {
		log.Info("updated pool snapshots", "count", n)
		r.Recorder.Eventf(class, nil, corev1.EventTypeNormal, EventReasonSuccessfulUpdate, ActionUpdatePool, "Updated %d pools to the class's policy", n)
	}
	for _, pool := range plan.remove {
		if err := r.Client.Delete(ctx, pool, client.Preconditions{UID: &pool.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting pool %s: %w", pool.Name, err))
			continue
		}
		log.Info("deleted pool of a node that no longer matches", "pool", pool.Name, "node", pool.Spec.NodeName)
		r.Recorder.Eventf(class, pool, corev1.EventTypeNormal, EventReasonSuccessfulDelete, ActionDeletePool,
			"Deleted pool %s: node %s no longer matches the selector", pool.Name, pool.Spec.NodeName)
	}
	r.reportConflicts(class, res.plan.conflicts)
	if err := errors.Join(errs...); err != nil {
		res.reason = v1alpha1.ReasonSyncFailed
		return res, err
	}
	return res, nil
}

// createPools creates the pools of nodes in slow-start batches. A create that fails is
// followed by a GET from the API server (layer 1 of single-class-per-node): a pool of this
// class means another pass of ours already made it (success); a pool of another class is a
// conflict, reported and not an error. The webhook's CREATE check (layer 2) answers before
// storage, so a denied create is treated the same way.
func (r *ClassReconciler) createPools(ctx context.Context, class *v1alpha1.SandboxPoolClass, nodes []string, snap Snapshot) (int, []nodeConflict, error) {
	var (
		mu        sync.Mutex // guards conflicts and created
		conflicts []nodeConflict
		created   int
	)
	_, lastOK, err := slowStartBatch(len(nodes), r.startBatch(class.Name), func(i int) error {
		pool := newPool(class, nodes[i], snap)
		err := r.Client.Create(ctx, pool, client.FieldOwner(v1alpha1.FieldManagerController))
		if err == nil {
			mu.Lock()
			created++
			mu.Unlock()
			return nil
		}
		var existing v1alpha1.SandboxPool
		if gerr := r.APIReader.Get(ctx, types.NamespacedName{Name: pool.Name}, &existing); gerr != nil {
			return fmt.Errorf("creating pool %s: %w", pool.Name, err)
		}
		if existing.Spec.ClassRef.Name == class.Name {
			return nil
		}
		mu.Lock()
		conflicts = append(conflicts, nodeConflict{Node: nodes[i], Pool: pool.Name, Class: existing.Spec.ClassRef.Name})
		mu.Unlock()
		return nil
	})
	r.mu.Lock()
	if r.firstBatch == nil {
		r.firstBatch = map[string]int{}
	}
	if err != nil || lastOK == 0 {
		delete(r.firstBatch, class.Name)
	} else {
		r.firstBatch[class.Name] = min(2*lastOK, r.burst())
	}
	r.mu.Unlock()
	return created, conflicts, err
}

func (r *ClassReconciler) startBatch(class string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.firstBatch[class]; b > 0 {
		return b
	}
	return slowStartInitialBatch
}

// reportConflicts emits a Warning event for each conflicting node not reported before.
func (r *ClassReconciler) reportConflicts(class *v1alpha1.SandboxPoolClass, conflicts []nodeConflict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conflicted == nil {
		r.conflicted = map[string]map[string]bool{}
	}
	now := make(map[string]bool, len(conflicts))
	for _, c := range conflicts {
		now[c.Node] = true
		if !r.conflicted[class.Name][c.Node] {
			r.Recorder.Eventf(class, nil, corev1.EventTypeWarning, v1alpha1.ReasonNodeConflict.String(), ActionCreatePool,
				"Node %s already has pool %s of class %s; this class does not get a pool there", c.Node, c.Pool, c.Class)
		}
	}
	r.conflicted[class.Name] = now
}

// noteFanout measures the fan-out: from the first pass that finds the class's generation out
// of sync to the first pass that finds it in sync.
func (r *ClassReconciler) noteFanout(class *v1alpha1.SandboxPoolClass, outOfSync bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fanoutSince == nil {
		r.fanoutSince = map[string]fanoutStart{}
	}
	start, started := r.fanoutSince[class.Name]
	switch {
	case outOfSync && (!started || start.generation != class.Generation):
		r.fanoutSince[class.Name] = fanoutStart{generation: class.Generation, at: r.Clock.Now()}
	case !outOfSync && started:
		fanoutDuration.Observe(r.Clock.Since(start.at).Seconds())
		delete(r.fanoutSince, class.Name)
	}
}

// forget drops what the reconciler remembers about a deleted class.
func (r *ClassReconciler) forget(class string) {
	r.mu.Lock()
	delete(r.fanoutSince, class)
	delete(r.conflicted, class)
	delete(r.firstBatch, class)
	r.mu.Unlock()
	forgetClassMetrics(class)
}

// nodes returns every node's name and labels, from the metadata-only cache.
func (r *ClassReconciler) nodes(ctx context.Context) (map[string]nodeView, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make(map[string]nodeView, len(list.Items))
	for _, n := range list.Items {
		nodes[n.Name] = nodeView{Name: n.Name, Labels: n.Labels}
	}
	return nodes, nil
}

// finalizeClass deletes every pool of a deleted class (the cascade does not wait for a
// garbage collector) and releases the class once none is left. Each pool goes when its own
// finalizer is released (its mirror pod gone, or the finalizer timeout).
func (r *ClassReconciler) finalizeClass(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool) error {
	var errs []error
	deleting := 0
	for _, pool := range ours {
		if pool.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, pool, client.Preconditions{UID: &pool.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting pool %s: %w", pool.Name, err))
			continue
		}
		deleting++
	}
	if deleting > 0 {
		logf.FromContext(ctx).Info("class deleted: deleting its pools", "count", deleting)
		r.Recorder.Eventf(class, nil, corev1.EventTypeNormal, EventReasonSuccessfulDelete, ActionDeletePool,
			"Class deleted: deleting its %d pools", deleting)
	}
	if len(errs) > 0 || len(ours) > 0 || !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerClassPools) {
		return errors.Join(errs...) // pool deletions bring the class back
	}
	orig := class.DeepCopy()
	controllerutil.RemoveFinalizer(class, v1alpha1.FinalizerClassPools)
	if err := r.Client.Patch(ctx, class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(v1alpha1.FieldManagerController)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the finalizer of class %s: %w", class.Name, err)
	}
	return nil
}

// updateStatus computes the class's whole status and applies it (field manager
// sandboxpool-controller) when it differs from what the class shows.
func (r *ClassReconciler) updateStatus(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool, res syncResult, syncErr error) error {
	want := v1alpha1.SandboxPoolClassStatus{ObservedGeneration: class.Generation}
	counts := poolCounts{byPhase: map[v1alpha1.SandboxPoolPhase]int{}}
	for _, p := range ours {
		counts.byPhase[p.Status.Phase]++
		want.TotalSandboxPools++
		if p.Status.Phase == v1alpha1.PhaseReady {
			want.ReadySandboxPools++
		}
		if r := p.Status.Resize; r != nil && r.Status == v1alpha1.ResizeDeferred {
			counts.resizeDeferred++
		}
		if meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) {
			counts.heartbeatStale++
		}
	}
	want.NotReadySandboxPools = want.TotalSandboxPools - want.ReadySandboxPools
	setPoolMetrics(class.Name, counts)

	want.Conditions = append([]metav1.Condition(nil), class.Status.Conditions...)
	conflict := metav1.Condition{Type: v1alpha1.ConditionNodeConflict.String(), ObservedGeneration: class.Generation,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoConflict.String(), Message: "no selected node has a pool of another class"}
	if cs := res.plan.conflicts; len(cs) > 0 {
		conflict.Status, conflict.Reason, conflict.Message = metav1.ConditionTrue, v1alpha1.ReasonNodeConflict.String(), conflictMessage(cs)
	}
	meta.SetStatusCondition(&want.Conditions, conflict)
	synced := metav1.Condition{Type: v1alpha1.ConditionPoolsSynced.String(), ObservedGeneration: class.Generation,
		Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllPoolsSynced.String(), Message: "every selected node has a pool with the class's policy"}
	switch {
	case syncErr != nil:
		synced.Status, synced.Reason, synced.Message = metav1.ConditionFalse, res.reason.String(), syncErr.Error()
	case res.more:
		synced.Status, synced.Reason = metav1.ConditionFalse, v1alpha1.ReasonProgressing.String()
		synced.Message = fmt.Sprintf("%d nodes still need a pool", len(res.plan.create)-r.burst())
	}
	meta.SetStatusCondition(&want.Conditions, synced)

	if !ssa.StatusChanged(&class.Status, &want) {
		return nil
	}
	return ssa.ApplyStatus(ctx, r.Client, class, &want, v1alpha1.FieldManagerController)
}

func (r *ClassReconciler) burst() int {
	if r.BurstCreates <= 0 {
		return DefaultBurstCreates
	}
	return r.BurstCreates
}

// conflictMessage names the winning class of each conflicting node (the first few).
func conflictMessage(cs []nodeConflict) string {
	var b strings.Builder
	for i, c := range cs {
		if i == maxConflictsInMessage {
			fmt.Fprintf(&b, "; and %d more nodes", len(cs)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s is owned by class %s (pool %s)", c.Node, c.Class, c.Pool)
	}
	return b.String()
}

// poolPatch is a JSON merge patch from the cached pool to the desired one. The snapshot and
// the two labels are the controller's alone, so they are written without a resourceVersion
// precondition (the agent's status writes must not make every snapshot update conflict);
// owner references and finalizers are lists a merge patch replaces whole, so a change to
// them is made only against the version it was computed from.
func poolPatch(orig, want *v1alpha1.SandboxPool) client.Patch {
	if slices.Equal(orig.Finalizers, want.Finalizers) && equality.Semantic.DeepEqual(orig.OwnerReferences, want.OwnerReferences) {
		return client.MergeFrom(orig)
	}
	return client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
}

func findPool(pools []*v1alpha1.SandboxPool, name string) *v1alpha1.SandboxPool {
	for _, p := range pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}
