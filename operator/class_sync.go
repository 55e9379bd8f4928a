package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// updateWorkers is how many snapshot updates run at once: a policy change reaches every
// node in about N/updateWorkers round trips rather than N.
const updateWorkers = 32

// syncResult is what one sync pass did and found.
type syncResult struct {
	plan classPlan
	// more is true when the burst cap left creates for the next pass.
	more bool
	// recheck is when to look again at creates left out as expected (notExpected): the
	// cache shows them before then, or they are made again.
	recheck time.Duration
	// permanent marks a syncErr that retrying cannot fix (the class must change first).
	permanent bool
	reason    v1alpha1.ConditionReason
}

// sync makes the class's pools match its selector and policy: it plans the pass
// (planClass) and carries the plan out, the creates in slow-start batches under the burst
// cap. It is the one place the class's pools are written.
func (r *ClassReconciler) sync(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool) (syncResult, error) {
	log := logf.FromContext(ctx)
	sel, err := metav1.LabelSelectorAsSelector(class.Spec.Selector)
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
	if d, done := r.classes.noteFanout(class.Name, class.Generation, len(plan.create)+len(plan.update)+len(plan.remove) > 0, r.Clock.Now()); done {
		fanoutDuration.Observe(d.Seconds())
	}

	var errs []error
	cached := make(map[string]bool, len(ours))
	for _, p := range ours {
		cached[p.Spec.NodeName] = true
	}
	create := r.classes.notExpected(class.Name, plan.create, func(node string) bool { return cached[node] }, r.Clock.Now())
	if len(create) < len(plan.create) {
		res.recheck = expectCreatedFor
	}
	if len(create) > r.burst() {
		create, res.more = create[:r.burst()], true
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
	for _, c := range r.classes.newConflicts(class.Name, res.plan.conflicts) {
		r.Recorder.Eventf(class, nil, corev1.EventTypeWarning, v1alpha1.ReasonNodeConflict.String(), ActionCreatePool,
			"Node %s already has pool %s of class %s; this class does not get a pool there", c.Node, c.Pool, c.Class)
	}
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
	var made []string
	_, lastOK, err := slowStartBatch(len(nodes), r.classes.firstBatch(class.Name), func(i int) error {
		pool := newPool(class, nodes[i], snap)
		err := r.Client.Create(ctx, pool, client.FieldOwner(v1alpha1.FieldManagerController))
		if err == nil {
			mu.Lock()
			created++
			made = append(made, nodes[i])
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
	r.classes.noteBatch(class.Name, lastOK, err, r.burst())
	r.classes.expectCreated(class.Name, made, r.Clock.Now())
	return created, conflicts, err
}

// updatePools patches the pools of update to their desired state, updateWorkers at a time,
// and returns every error.
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
