package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// agentReports applies the agent's conditions as the agent's field manager.
func agentReports(t *testing.T, pool string, podReady metav1.ConditionStatus) {
	t.Helper()
	agentReportsWith(t, pool, podReady, nil)
}

// agentReportsWith applies the agent's conditions and the other status fields given, as the
// agent's field manager: everything the agent owns, as each of its applies does.
func agentReportsWith(t *testing.T, pool string, podReady metav1.ConditionStatus, fields map[string]any) {
	t.Helper()
	cond := func(typ string, s metav1.ConditionStatus) map[string]any {
		return framework.Condition(typ, string(s), "Test")
	}
	status := map[string]any{"conditions": []any{
		cond(v1alpha1.ConditionPlaceholderPodReady.String(), podReady),
		cond(v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionTrue),
		cond(v1alpha1.ConditionResourceSynced.String(), metav1.ConditionTrue),
	}}
	maps.Copy(status, fields)
	patch, _ := json.Marshal(framework.PoolStatus(pool, status).Object)
	p := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}
	if err := admin.Status().Patch(context.Background(), p, client.RawPatch(types.ApplyPatchType, patch),
		client.FieldOwner(v1alpha1.FieldManagerAgent)); err != nil {
		t.Fatalf("agent status: %v", err)
	}
}

// renewLease renews the pool's Lease in its node's name, as the node's agent does.
func renewLease(t *testing.T, pool string) {
	t.Helper()
	renewLeaseAs(t, pool, nodeOf(t, pool))
}

// nodeOf is the pool's spec.nodeName.
func nodeOf(t *testing.T, pool string) string {
	t.Helper()
	var p v1alpha1.SandboxPool
	if err := admin.Get(context.Background(), types.NamespacedName{Name: pool}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}

// renewLeaseAs renews the pool's Lease in holder's name.
func renewLeaseAs(t *testing.T, pool, holder string) {
	t.Helper()
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	var l coordinationv1.Lease
	err := admin.Get(ctx, types.NamespacedName{Namespace: leaseNamespace, Name: pool}, &l)
	if err != nil {
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: pool},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &now}}
		if err := admin.Create(ctx, &l); err != nil {
			t.Fatal(err)
		}
		return
	}
	l.Spec.RenewTime, l.Spec.HolderIdentity = &now, &holder
	if err := admin.Update(ctx, &l); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls the pool until cond holds or the deadline passes.
func waitFor(t *testing.T, name, what string, within time.Duration, cond func(*v1alpha1.SandboxPool) bool) *v1alpha1.SandboxPool {
	t.Helper()
	var p v1alpha1.SandboxPool
	support.Eventually(t, what, within, 20*time.Millisecond, func() (bool, string) {
		err := admin.Get(context.Background(), types.NamespacedName{Name: name}, &p)
		b, _ := json.MarshalIndent(p.Status, "", "  ")
		return err == nil && cond(&p), fmt.Sprintf("get: %v; status:\n%s", err, b)
	})
	return &p
}

func phaseIs(ph v1alpha1.SandboxPoolPhase, condType string, status metav1.ConditionStatus, reason string) func(*v1alpha1.SandboxPool) bool {
	return func(p *v1alpha1.SandboxPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, condType)
		return p.Status.Phase == ph && c != nil && c.Status == status && c.Reason == reason
	}
}

// reconciles is the pool controller's count of reconciles that did not fail (success,
// requeue, requeue_after), from its own metrics.
func reconciles(t *testing.T) float64 {
	t.Helper()
	return reconcilesOf(t, "sandboxpool")
}

// reconcilesOf is the count of reconciles of the named controller that did not fail.
func reconcilesOf(t *testing.T, controller string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		var total float64
		for _, m := range f.GetMetric() {
			var ctrlOK, failed bool
			for _, l := range m.GetLabel() {
				ctrlOK = ctrlOK || (l.GetName() == "controller" && l.GetValue() == controller)
				failed = failed || (l.GetName() == "result" && l.GetValue() == "error")
			}
			if ctrlOK && !failed {
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
	return 0
}

// TestPoolPhaseLifecycle walks one pool through the phase table on a real API server:
// node missing, agent not yet reporting, Ready, quiet renewals, lease expiry without any
// new event, pod loss after Ready, node deletion.
func TestPoolPhaseLifecycle(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const node = "op-node-1"
	name := naming.PoolName(node)
	if err := admin.Create(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj()) })

	waitFor(t, name, "no node → Unready", 10*time.Second,
		phaseIs(v1alpha1.PhaseUnready, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionTrue, "NodeNotFound"))

	if err := admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	p := waitFor(t, name, "node, no lease → Pending", 10*time.Second,
		phaseIs(v1alpha1.PhasePending, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, "LeaseNotFound"))
	if p.Annotations[v1alpha1.AnnotationEverReady] != "" {
		t.Errorf("ever-ready set before Ready")
	}

	renewLease(t, name)
	agentReports(t, name, metav1.ConditionTrue)
	waitFor(t, name, "lease and pod ready → Ready", 10*time.Second,
		phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue, "LeaseRenewed"))
	p = waitFor(t, name, "Ready", 10*time.Second, func(p *v1alpha1.SandboxPool) bool { return p.Status.Phase == v1alpha1.PhaseReady })
	if p.Annotations[v1alpha1.AnnotationEverReady] != "" {
		t.Errorf("ever-ready written while the pool is Ready (its phase says so): a write per pool a fan-out does not need")
	}

	// At rest, renewals of a healthy pool are not reconciled one by one (the pass that saw
	// it healthy requeued it for its Lease's expiry, and that pass reads the newest
	// renewal), and nothing is written. Renewed every TTL/5 through two TTLs, the pool
	// passes two expiries of the Lease it was last reconciled with: a pass that missed the
	// renewals would have marked it expired, which is a write.
	rv := p.ResourceVersion
	for end := time.Now().Add(2 * leaseTTL); time.Now().Before(end); {
		time.Sleep(leaseTTL / 5) // the stand-in agent's renewal interval
		renewLease(t, name)
	}
	var rested v1alpha1.SandboxPool
	if err := admin.Get(ctx, types.NamespacedName{Name: name}, &rested); err != nil {
		t.Fatal(err)
	}
	if rested.ResourceVersion != rv || rested.Status.Phase != v1alpha1.PhaseReady {
		b, _ := json.MarshalIndent(rested.Status, "", " ")
		t.Fatalf("renewals at rest wrote the pool: resourceVersion %s → %s\n%s", rv, rested.ResourceVersion, b)
	}

	// The agent stops renewing: the phase drops at lease expiry with no other event, and
	// comes back when renewals resume; twice, to see both directions repeat.
	for round := range 2 {
		lastRenewal := time.Now()
		waitFor(t, name, "lease expired, pod ready → Degraded", leaseTTL+10*time.Second,
			phaseIs(v1alpha1.PhaseDegraded, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, "LeaseExpired"))
		t.Logf("round %d: Degraded %s after the last renewal (TTL %s)", round, time.Since(lastRenewal).Round(time.Millisecond), leaseTTL)
		if round == 1 {
			break
		}
		renewed := time.Now()
		renewLease(t, name)
		waitFor(t, name, "renewal resumed → Ready", 10*time.Second,
			phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue, "LeaseRenewed"))
		t.Logf("round %d: Ready again %s after the renewal", round, time.Since(renewed).Round(time.Millisecond))
	}

	// The pod goes away after the pool had been Ready: Unready, not Pending.
	agentReports(t, name, metav1.ConditionFalse)
	p = waitFor(t, name, "pod lost after Ready → Unready", 10*time.Second,
		phaseIs(v1alpha1.PhaseUnready, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, "LeaseExpired"))
	if p.Annotations[v1alpha1.AnnotationEverReady] != "true" {
		t.Errorf("the pool left Ready without its ever-ready marker: %v", p.Annotations)
	}

	// Node deletion while the agent is healthy and the pod ready: Ready → Unready.
	renewLease(t, name)
	agentReports(t, name, metav1.ConditionTrue)
	waitFor(t, name, "healthy again → Ready", 10*time.Second,
		phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionFalse, "NodeExists"))
	if err := admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	p = waitFor(t, name, "node deleted → NodeNotFound", 10*time.Second,
		phaseIs(v1alpha1.PhaseUnready, v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionTrue, "NodeNotFound"))
	t.Logf("node deleted → Unready observed after %s", time.Since(deleted).Round(time.Millisecond))
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionNodeNotFound.String()); !strings.Contains(c.Message, node) {
		t.Errorf("message does not name the node: %q", c.Message)
	}
	// The agent's own conditions were never touched by the controller.
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResourceSynced.String()); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("agent condition lost: %+v", c)
	}
}

// TestLeaseOfAnotherHolderIgnored: a Lease renewed in another identity's name says nothing
// about the pool's node, even if fresh. The controller ignores it (PlaceholderAgentHealthy
// False, LeaseHolderMismatch) with a Warning event, and counts the Lease again once the
// node holds it.
func TestLeaseOfAnotherHolderIgnored(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const node = "op-node-holder"
	name := naming.PoolName(node)
	if err := admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	if err := admin.Create(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, wrappers.MakePool(node).Class("c1").Resources("2", "4Gi").Obj()) })
	agentReports(t, name, metav1.ConditionTrue)
	renewLease(t, name)
	waitFor(t, name, "its node's Lease → Ready", 10*time.Second,
		phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue, "LeaseRenewed"))

	renewLeaseAs(t, name, "op-node-other")
	p := waitFor(t, name, "a fresh Lease held by another node → ignored", 10*time.Second,
		phaseIs(v1alpha1.PhaseDegraded, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, v1alpha1.ReasonLeaseHolderMismatch.String()))
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()); !strings.Contains(c.Message, `"op-node-other"`) {
		t.Errorf("the condition does not name the holder: %q", c.Message)
	}
	eventually(t, "a Warning event about the Lease", 10*time.Second, func() (bool, string) {
		var evs eventsv1.EventList
		if err := admin.List(ctx, &evs); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == v1alpha1.ReasonLeaseHolderMismatch.String() && e.Type == corev1.EventTypeWarning {
				return strings.Contains(e.Note, "op-node-other"), e.Note
			}
		}
		return false, fmt.Sprintf("%d events, none about %s", len(evs.Items), name)
	})

	renewLease(t, name)
	waitFor(t, name, "its node holds the Lease again → Ready", 10*time.Second,
		phaseIs(v1alpha1.PhaseReady, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue, "LeaseRenewed"))
}

// TestNewPoolWithoutAgent: a new pool on a node whose agent never takes its Lease is left
// unwritten for the Lease TTL (its agent may be on its way), then Pending with LeaseNotFound.
func TestNewPoolWithoutAgent(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const node = "op-node-no-agent"
	if err := admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	pool := wrappers.MakePool(node).Class("c1").Resources("1", "1Gi").Obj()
	if err := admin.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, wrappers.MakePool(node).Class("c1").Resources("1", "1Gi").Obj()) })
	waitFor(t, naming.PoolName(node), "no agent within the Lease TTL → Pending", leaseTTL+10*time.Second,
		phaseIs(v1alpha1.PhasePending, v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse, "LeaseNotFound"))
}
