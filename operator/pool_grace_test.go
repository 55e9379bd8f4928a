package operator

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func TestNewPoolGrace(t *testing.T) {
	const ttl = 40 * time.Second
	created := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &PoolReconciler{LeaseTTL: ttl}
	nodeExists := metav1.Condition{Type: v1alpha1.ConditionNodeNotFound.String(), Status: metav1.ConditionFalse}
	nodeGone := metav1.Condition{Type: v1alpha1.ConditionNodeNotFound.String(), Status: metav1.ConditionTrue}
	noLease := metav1.Condition{Type: v1alpha1.ConditionPlaceholderAgentHealthy.String(), Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonLeaseNotFound.String()}
	renewed := metav1.Condition{Type: v1alpha1.ConditionPlaceholderAgentHealthy.String(), Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonLeaseRenewed.String()}
	podStarting := metav1.Condition{Type: v1alpha1.ConditionPlaceholderPodReady.String(), Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonPodNotRunning.String()}
	expired := metav1.Condition{Type: v1alpha1.ConditionPlaceholderAgentHealthy.String(), Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonLeaseExpired.String()}
	pool := func(conds ...metav1.Condition) *v1alpha1.SandboxPool {
		p := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		p.Status.Conditions = conds
		return p
	}
	for _, c := range []struct {
		name        string
		pool        *v1alpha1.SandboxPool
		node, lease metav1.Condition
		at          time.Duration
		want        time.Duration
	}{
		{"new pool, node there, no Lease yet: wait for the agent until the TTL", pool(), nodeExists, noLease, 5 * time.Second, ttl - 5*time.Second},
		{"its Lease is there, the agent has not reported: wait for its report", pool(), nodeExists, renewed, 5 * time.Second, ttl - 5*time.Second},
		{"the agent has reported: written now", pool(podStarting), nodeExists, renewed, 5 * time.Second, 0},
		{"the TTL has passed: Pending now", pool(), nodeExists, noLease, ttl, 0},
		{"no node: Unready now", pool(), nodeGone, noLease, time.Second, 0},
		{"a Lease that expired: written now", pool(), nodeExists, expired, time.Second, 0},
		{"the controller has written the pool before: written now", pool(nodeExists), nodeExists, noLease, time.Second, 0},
	} {
		if got := max(0, r.newPoolGrace(c.pool, c.node, c.lease, created.Add(c.at))); got != c.want {
			t.Errorf("%s: grace %s, want %s", c.name, got, c.want)
		}
	}
}
