package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/agent"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestLeaseIdentity: where NodeRestriction runs, the node's own identity may not write its
// pools' Leases, and an agent given no --lease-kubeconfig fails every renewal; the per-node
// service account renews them. The RBAC of deploy/rbac grants Leases in the Lease namespace
// only, to either identity: not the controller's leader-election Lease, not kube-node-lease.
func TestLeaseIdentity(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	const node = "identity-node"
	pool := naming.PoolName(node)
	nodeClient, err := client.New(must(cp.AddUser(nodeUser(node), "system:nodes", "system:authenticated")), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	leaseClient, err := client.New(must(cp.AddUser(leaseUser(node), leaseGroups...)), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node)}}
	}

	// The node identity: NodeRestriction refuses the pool's Lease and says why.
	err = nodeClient.Create(ctx, lease(v1alpha1.DefaultLeaseNamespace, pool))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "kube-node-lease") {
		t.Fatalf("node identity creating its pool's Lease: %v, want Forbidden by NodeRestriction", err)
	}
	// The per-node service account: the pool's Lease yes, anything else in another
	// namespace no.
	if err := leaseClient.Create(ctx, lease(v1alpha1.DefaultLeaseNamespace, pool)); err != nil {
		t.Fatalf("the lease identity creating its pool's Lease: %v", err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, lease(v1alpha1.DefaultLeaseNamespace, pool)) })
	leader := lease(v1alpha1.DefaultSystemNamespace, "identity-test-leader")
	if err := admin.Create(ctx, leader); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, leader) })
	var got coordinationv1.Lease
	if err := leaseClient.Get(ctx, client.ObjectKeyFromObject(leader), &got); !apierrors.IsForbidden(err) {
		t.Errorf("the lease identity reading a Lease in %s: %v, want Forbidden", leader.Namespace, err)
	}
	if err := leaseClient.Create(ctx, lease("kube-node-lease", node)); !apierrors.IsForbidden(err) {
		t.Errorf("the lease identity creating a node Lease in kube-node-lease: %v, want Forbidden", err)
	}

	// What RBAC alone says (a SubjectAccessReview asks the authorizers, not admission):
	// Leases only in the Lease namespace, for nodes as for the service accounts.
	for _, who := range []struct {
		user   string
		groups []string
	}{{nodeUser(node), []string{"system:nodes", "system:authenticated"}}, {leaseUser(node), leaseGroups}} {
		for ns, want := range map[string]bool{v1alpha1.DefaultLeaseNamespace: true, v1alpha1.DefaultSystemNamespace: false, "kube-system": false} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: who.user, Groups: who.groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update",
					Group: coordinationv1.GroupName, Resource: "leases", Name: "any-lease"},
			}}
			if err := admin.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("may %s update Leases in %s? %v (%s), want %v", who.user, ns, sar.Status.Allowed, sar.Status.Reason, want)
			}
		}
	}

	// An agent that renews with the node's identity fails every renewal and never holds
	// the Lease; the same agent with --lease-kubeconfig renews it.
	n := newNode(t, "identity-agent-node")
	p := wrappers.MakePool(n.name).Class("c1").Resources("500m", "64Mi").RuntimeClass("placeholder").Obj()
	if err := admin.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, p) })
	key := types.NamespacedName{Namespace: v1alpha1.DefaultLeaseNamespace, Name: p.Name}
	before := renewals(t, "error")
	n.startAgent(func(o *agent.Options) { o.LeaseKubeconfig = "" })
	eventually(t, "three failed renewals", 30*time.Second, func() (bool, string) {
		failed := renewals(t, "error") - before
		return failed >= 3, fmt.Sprintf("%v failed renewals", failed)
	})
	if err := admin.Get(ctx, key, &got); !apierrors.IsNotFound(err) {
		t.Fatalf("the pool's Lease after renewals as the node: %v, want NotFound", err)
	}
	n.stopAgent()
	n.startAgent()
	eventually(t, "the Lease renewed as the service account", 30*time.Second, func() (bool, string) {
		err := admin.Get(ctx, key, &got)
		return err == nil && got.Spec.HolderIdentity != nil && *got.Spec.HolderIdentity == n.name, fmt.Sprint(err)
	})
}

// renewals reads the agent's lease renewal counter with result r.
func renewals(t *testing.T, r string) float64 {
	t.Helper()
	mfs, err := gatherMetrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sandboxpool_agent_lease_renewals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == r {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// gatherMetrics reads the agents' metrics (controller-runtime's registry, shared by every
// agent this process runs; the tests run one at a time).
func gatherMetrics() ([]*dto.MetricFamily, error) { return metrics.Registry.Gather() }
