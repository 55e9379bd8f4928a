package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestFinalizerCountsOnlyTheNodesMirrorPods: a deleted pool waits for the mirror pods of its
// own lock only. Pods that merely carry the pool's label and annotation and are bound to its
// node — a tenant's in its own namespace (even with kubelet's mirror annotation), one in the
// pod namespace without that annotation — and a mirror pod bound to another node do not hold
// it: once the real mirror pod is gone the finalizer is released because the pod is gone,
// not by the finalizer timeout, while the forged pods are still there.
func TestFinalizerCountsOnlyTheNodesMirrorPods(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const class, node, tenantNS = "forged", "forged-node", "forged-tenant"
	createNode(t, node, map[string]string{selectorLabel: class})
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}) })
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	name := classWithPool(ctx, t, class, node)
	own := mirrorPod(t, name, node)
	for _, p := range []*corev1.Pod{
		podLike(t, tenantNS, "sandbox-pool-1-"+node, name, node, true),
		podLike(t, mirrorNamespace, "sandbox-pool-forged-"+node, name, node, false),
		podLike(t, mirrorNamespace, "sandbox-pool-other-"+node, name, "forged-other-node", true),
	} {
		t.Cleanup(func() { deletePodNow(t, p) })
	}
	released := func() float64 {
		return labelledCounter(t, "sandboxpool_pool_finalizer_releases_total", "cause", "pod-gone")
	}
	before := released()

	if err := admin.Delete(ctx, &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.SandboxPool
	if err := admin.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pool not held by its finalizer while its mirror pod exists: %v", err)
	}
	uid := p.UID
	deletePodNow(t, own)
	eventually(t, "the pool released once its own mirror pod is gone", finalizerTimeout+15*time.Second, func() (bool, string) {
		var now v1alpha1.SandboxPool
		err := admin.Get(ctx, types.NamespacedName{Name: name}, &now)
		return apierrors.IsNotFound(err) || (err == nil && now.UID != uid), fmt.Sprint(err)
	})
	if got := released() - before; got != 1 {
		t.Errorf("releases because the pod is gone grew by %v, want 1 (the forged pods held the pool until the timeout)", got)
	}
	if evs := classEvents(t, v1alpha1.KindSandboxPool, name, "FinalizerTimeout"); len(evs) > 0 {
		t.Errorf("a FinalizerTimeout event: %s", evs[0].Note)
	}
}

// TestForgedRenewTimeExpiresAndNodeGoneCollects: the Lease of a pool whose node is gone is
// written once with renewTime 2099 by its node and never again. The controller counts the
// write as one renewal, seen when it arrived: the agent is healthy for one TTL, then
// LeaseExpired, and the pool is deleted at the end of the node-gone grace as for any node
// whose agent stopped.
func TestForgedRenewTimeExpiresAndNodeGoneCollects(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const node = "forged-lease-node"
	name := naming.PoolName(node)
	if err := admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Delete(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj())
		_ = admin.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: name}})
	})
	agentReports(t, name, metav1.ConditionTrue)
	renewLease(t, name)
	waitFor(t, name, "Ready", 10*time.Second,
		phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue, "LeaseRenewed"))

	if err := admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	if err := admin.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: name}, &l); err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)))
	if err := admin.Update(ctx, &l); err != nil {
		t.Fatal(err)
	}
	p := waitFor(t, name, "the agent's Lease expires although it says 2099", leaseTTL+10*time.Second,
		phaseIs(v1alpha1.PhaseUnready, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired.String()))
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionNodeNotFound.String()); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("NodeNotFound is %+v, want True", c)
	}
	eventually(t, "the pool of the node that is gone deleted", nodeGoneGrace+15*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.SandboxPool{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// labelledCounter is the value of the controller's counter name whose label has value.
func labelledCounter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
