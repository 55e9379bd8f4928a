package operator

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// DefaultNodeGoneGrace is how long a pool's node must have been gone before the controller
// deletes the pool (--node-gone-grace). It is longer than the pod garbage collector's 40 s
// quarantine of pods on a missing node and than one --lease-ttl, so a Node object deleted
// and registered again at once keeps its pool, and shorter than the 5 minutes after which
// the SandboxPoolsUnready alert fires, so removing a node does not page (docs/operator.md).
const DefaultNodeGoneGrace = 2 * time.Minute

// decideNodeGone is the rule for the pool of a node that is gone, a pure function of the
// pool's conditions as the controller computed them from what the API shows: the deadline
// is NodeNotFound's lastTransitionTime plus grace, so a restarted controller finds the same
// deadline. It says to delete the pool once the deadline has passed and the agent's Lease
// is not fresh; before the deadline, wait is how long is left. A pool whose agent still
// renews its Lease is kept: its machine runs and only its Node object is gone (kubelet
// registers its Node only when it starts), and deleting the pool would make that agent
// remove the node's lock. The pool is requeued at the Lease's expiry anyway, and is
// deleted then.
func decideNodeGone(conds []metav1.Condition, now time.Time, grace time.Duration) (deletePool bool, wait time.Duration) {
	gone := meta.FindStatusCondition(conds, v1alpha1.ConditionNodeNotFound.String())
	if gone == nil || gone.Status != metav1.ConditionTrue {
		return false, 0
	}
	if left := gone.LastTransitionTime.Add(grace).Sub(now); left > 0 {
		return false, left
	}
	if meta.IsStatusConditionTrue(conds, v1alpha1.ConditionPlaceholderAgentHealthy.String()) {
		return false, 0
	}
	return true, 0
}

// deleteIfNodeGone deletes the pool, at the version the decision was made on, when
// decideNodeGone says so and the API server (not the cache, which may not have a returning
// node yet) confirms the node is absent. The deletion goes through the pool's finalizer
// (released at once, since the node is gone), which deletes the agent's Lease; a pool
// without the finalizer has its Lease deleted here first. It reports whether the pool was
// deleted, or how long until it may be.
func (r *PoolReconciler) deleteIfNodeGone(ctx context.Context, pool *v1alpha1.SandboxPool, conds []metav1.Condition, now time.Time) (bool, time.Duration, error) {
	grace := r.NodeGoneGrace
	if grace <= 0 {
		grace = DefaultNodeGoneGrace
	}
	deletePool, wait := decideNodeGone(conds, now, grace)
	if !deletePool {
		return false, wait, nil
	}
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	exists, err := nodeExistsIn(ctx, reader, pool.Spec.NodeName)
	if err != nil || exists {
		return false, 0, err // a returning node's create event reconciles the pool again
	}
	if !controllerutil.ContainsFinalizer(pool, v1alpha1.FinalizerPoolPlaceholderPod) {
		if err := r.deleteLease(ctx, pool); err != nil {
			return false, 0, err
		}
	}
	// The resourceVersion precondition makes a pass that read a stale copy (the pool already
	// deleted by an earlier pass, whose update the cache has not shown yet) a conflict
	// rather than a second deletion, event and count: the newer version's event brings the
	// pool back.
	if err := r.Client.Delete(ctx, pool, client.Preconditions{UID: &pool.UID, ResourceVersion: &pool.ResourceVersion}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return false, 0, nil
		}
		return false, 0, fmt.Errorf("deleting pool %s of node %s, gone: %w", pool.Name, pool.Spec.NodeName, err)
	}
	since := meta.FindStatusCondition(conds, v1alpha1.ConditionNodeNotFound.String()).LastTransitionTime.UTC().Format(time.RFC3339)
	nodeGonePoolsDeleted.Inc()
	logf.FromContext(ctx).Info("deleted the pool of a node that is gone", "since", since, "grace", grace)
	r.Recorder.Eventf(classOf(pool), pool, corev1.EventTypeNormal, EventReasonNodeGone, ActionDeletePool,
		"Deleted pool %s: node %s has not existed since %s (--node-gone-grace %s) and its agent's Lease is not renewed; Lease %s/%s goes with it. The class creates the pool again if the node returns",
		pool.Name, pool.Spec.NodeName, since, grace, r.LeaseNamespace, pool.Name)
	return true, 0, nil
}

// deleteLease deletes the pool's agent Lease: the agent of a node that is gone cannot.
func (r *PoolReconciler) deleteLease(ctx context.Context, pool *v1alpha1.SandboxPool) error {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.LeaseNamespace, Name: pool.Name}}
	if err := r.Client.Delete(ctx, lease); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting lease %s/%s of pool %s: %w", r.LeaseNamespace, pool.Name, pool.Name, err)
	}
	return nil
}

// classOf is the object an event about the pool's deletion is recorded on: the class that
// controls the pool (the pool itself disappears), or the pool when no class does.
func classOf(pool *v1alpha1.SandboxPool) runtime.Object {
	ref := metav1.GetControllerOf(pool)
	if ref == nil || ref.Kind != v1alpha1.KindSandboxPoolClass {
		return pool
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != v1alpha1.GroupName {
		return pool
	}
	return &v1alpha1.SandboxPoolClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name, UID: ref.UID},
	}
}

// nodeExistsIn reads the node's metadata from c (the metadata-only cache, or the API server).
func nodeExistsIn(ctx context.Context, c client.Reader, name string) (bool, error) {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	err := c.Get(ctx, types.NamespacedName{Name: name}, node)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("getting node %s: %w", name, err)
	}
	return true, nil
}
