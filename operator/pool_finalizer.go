package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// DefaultFinalizerTimeout is how long a deleted pool waits for its mirror pod to go before
// the controller removes its finalizer anyway (docs/design.md §3.4: 10 minutes).
const DefaultFinalizerTimeout = 10 * time.Minute

// releaseCause says why a pool's finalizer may go, or that it must stay.
type releaseCause string

const (
	keepFinalizer  releaseCause = ""
	releasePodGone releaseCause = "pod-gone"
	// releaseNodeGone: no node means no kubelet to run the pod and no agent to remove its
	// manifest; the pod garbage collector removes a mirror pod of a deleted node.
	releaseNodeGone releaseCause = "node-gone"
	releaseTimeout  releaseCause = "timeout"
)

// decideRelease is the pool finalizer's rule. When it says keep, wait is how long until the
// timeout would release the pool.
func decideRelease(podsLeft int, nodeExists bool, deletedAt, now time.Time, timeout time.Duration) (releaseCause, time.Duration) {
	switch {
	case podsLeft == 0:
		return releasePodGone, 0
	case !nodeExists:
		return releaseNodeGone, 0
	}
	if left := deletedAt.Add(timeout).Sub(now); left > 0 {
		return keepFinalizer, left
	}
	return releaseTimeout, 0
}

// finalize removes the pool's finalizer once its mirror pod is gone, its node is gone, or
// FinalizerTimeout has passed since the deletion (with a Warning event). When the node is
// gone it first deletes the pool's agent Lease: that agent is gone with its node.
func (r *PoolReconciler) finalize(ctx context.Context, pool *v1alpha1.SandboxPool) (time.Duration, error) {
	if !controllerutil.ContainsFinalizer(pool, v1alpha1.FinalizerPoolPlaceholderPod) {
		return 0, nil
	}
	pods, err := r.mirrorPods(ctx, pool)
	if err != nil {
		return 0, err
	}
	nodeExists, err := r.nodeExists(ctx, pool.Spec.NodeName)
	if err != nil {
		return 0, err
	}
	timeout := r.FinalizerTimeout
	if timeout <= 0 {
		timeout = DefaultFinalizerTimeout
	}
	cause, wait := decideRelease(len(pods), nodeExists, pool.DeletionTimestamp.Time, r.Clock.Now(), timeout)
	if cause == keepFinalizer {
		return wait, nil
	}
	if cause == releaseTimeout {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, EventReasonFinalizerTimeout, ActionRemoveFinalize,
			"Mirror pod %s still present %s after deletion; removing the finalizer anyway (node %s may keep its capacity locked until the manifest is removed)",
			strings.Join(pods, ", "), timeout, pool.Spec.NodeName)
	}
	if !nodeExists {
		if err := r.deleteLease(ctx, pool); err != nil {
			return 0, err
		}
	}
	orig := pool.DeepCopy()
	controllerutil.RemoveFinalizer(pool, v1alpha1.FinalizerPoolPlaceholderPod)
	if err := r.Client.Patch(ctx, pool, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(v1alpha1.FieldManagerController)); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("removing the finalizer of pool %s: %w", pool.Name, err)
	}
	poolFinalizerReleases.WithLabelValues(string(cause)).Inc()
	logf.FromContext(ctx).Info("released pool finalizer", "cause", cause)
	return 0, nil
}

// mirrorPods lists the mirror pods (namespace/name) of the pool's lock: in PodNamespace,
// bound to the pool's node, carrying kubelet's mirror annotation and naming the pool
// (poolOfMirrorPod). A pod that merely carries the pool's labels is none of them: one in
// another namespace, one without the mirror annotation (which only kubelet's create sets;
// deploy/placeholder-pod-policy.yaml refuses the pool's labels to anyone but the pod's own
// node), or one bound to another node. When the cache has none, the API server confirms:
// the cache may not have a new pod yet, and releasing a pool whose pod still runs would be
// wrong, while a confirmation costs one request per deleted pool.
func (r *PoolReconciler) mirrorPods(ctx context.Context, pool *v1alpha1.SandboxPool) ([]string, error) {
	opts := []client.ListOption{client.InNamespace(r.podNamespace()), client.MatchingLabels{v1alpha1.LabelPoolName: naming.LabelValue(pool.Name)}}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, opts...); err != nil {
		return nil, fmt.Errorf("listing the mirror pods of pool %s: %w", pool.Name, err)
	}
	if len(pods.Items) == 0 && r.APIReader != nil {
		if err := r.APIReader.List(ctx, &pods, opts...); err != nil {
			return nil, fmt.Errorf("listing the mirror pods of pool %s: %w", pool.Name, err)
		}
	}
	var names []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == pool.Spec.NodeName && r.poolOfMirrorPod(&p) == pool.Name {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// podNamespace is PodNamespace, or the default install's.
func (r *PoolReconciler) podNamespace() string {
	if r.PodNamespace == "" {
		return v1alpha1.DefaultPodNamespace
	}
	return r.PodNamespace
}

// poolOfMirrorPod is the full name of the pool whose lock o is a piece of, or "" when o is
// not a mirror pod in the pod namespace: its pool-name annotation, or its label for a pod
// without one (the label is the full name when it fits).
func (r *PoolReconciler) poolOfMirrorPod(o client.Object) string {
	if o.GetNamespace() != r.podNamespace() {
		return ""
	}
	if _, mirror := o.GetAnnotations()[corev1.MirrorPodAnnotationKey]; !mirror {
		return ""
	}
	if name := o.GetAnnotations()[v1alpha1.AnnotationPoolName]; name != "" {
		return name
	}
	return o.GetLabels()[v1alpha1.LabelPoolName]
}
