package operator

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// nodeCondition is NodeNotFound: True when the pool's node does not exist.
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
// The agent is healthy while the controller has seen the Lease renewed within the TTL, by
// its own clock (leaseRenewals): the renewTime a node writes extends nothing. Messages carry
// no changing timestamps, so a renewal alone never causes a write. leaseExpiresIn > 0 while
// the lease is fresh.
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
	renewed := r.renewals.observe(&lease, now, r.LeaseTTL)
	if left := renewed.Add(r.LeaseTTL).Sub(now); !renewed.IsZero() && left > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonLeaseRenewed.String()
		c.Message = fmt.Sprintf("lease renewed within the last %s", r.LeaseTTL)
		return c, left, nil
	}
	c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired.String()
	if renewed.IsZero() {
		c.Message = fmt.Sprintf("lease %s/%s never renewed (TTL %s)", r.LeaseNamespace, pool.Name, r.LeaseTTL)
	} else {
		c.Message = fmt.Sprintf("lease not renewed since %s, as the controller saw it (TTL %s)", renewed.UTC().Format(time.RFC3339), r.LeaseTTL)
	}
	return c, 0, nil
}

// holderOf is the spec.holderIdentity of a Lease ("" when unset or not a Lease).
func holderOf(o client.Object) string {
	if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}
