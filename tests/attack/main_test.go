// Package attack tries every write by which one party could speak for another, with real
// identities against a real API server, and checks that each forged write is refused by
// the layer meant to refuse it and each legitimate one allowed:
//
//   - the API server runs the Node authorizer and RBAC, as real clusters do, but not the
//     NodeRestriction admission plugin, so that the node admission policy
//     (deploy/rbac/node-policy.yaml) and the placeholder pods' policy
//     (deploy/placeholder-pod-policy.yaml) alone hold the nodes' own identities to their own
//     pool's Lease and their own mirror pods (NodeRestriction would refuse them every Lease
//     outside kube-node-lease, and every pod not bound to them);
//   - deploy/'s namespaces, RBAC, RuntimeClass, admission policies and webhook configuration
//     are applied, and the admission webhook runs in this process with the default
//     install's identities;
//   - two nodes authenticate with client certificates (system:node:<node> in system:nodes),
//     their Lease identities with tokens the API server issued bound to their Node objects
//     (TokenRequest, as hack/agent-lease-credentials.sh and the agent request them), the
//     controller, the pod garbage collector and a stray service account with tokens the API
//     server issued, an operator, a tenant (who may create pods in its own namespace) and a
//     cluster admin with client certificates.
//
// Every refusal by the API server's own policies is tried again with the webhook's
// configuration removed, and must be refused the same way: those rules hold while the
// webhook is down. The results are the table in docs/webhook.md ("Who may write what"): the
// test fails when the table there differs from what it measured;
// SANDBOXPOOL_UPDATE_DOCS=1 rewrites it.
package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/webhook"
)

var (
	suite framework.Suite
	// ids are the callers, by name (the identity column of the table).
	ids map[string]*identity
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp, framework.WithNodeAuthorizer(), framework.WithWebhooks(filepath.Join("deploy", "webhook"))))
}

// identity is one caller: its user name as the API server sees it, its clients and their
// configuration.
type identity struct {
	user string
	cfg  *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// Names of the callers.
const (
	nodeA     = "node-a"
	nodeB     = "node-b"
	leaseA    = "node-a's Lease identity"
	leaseB    = "node-b's Lease identity"
	ctrl      = "controller"
	oper      = "operator"
	tenant    = "tenant"
	admin     = "cluster admin"
	strayNode = "stray system:nodes member"
	straySA   = "stray service account of the Lease namespace"
	podGC     = "pod garbage collector"
	// leaseUnbound is node-a's Lease identity with a token bound to nothing (as
	// hack/agent-lease-credentials.sh made them before), leaseAasB one bound to node-b.
	leaseUnbound = "node-a's Lease identity, unbound token"
	leaseAasB    = "node-a's Lease identity, token bound to node-b"
	// nodeC is a node deleted during the attacks; leaseC its Lease identity.
	nodeC  = "node-c"
	leaseC = "node-c's Lease identity"
)

// tenantNS is the tenant's own namespace, where it may create pods.
const tenantNS = "attack-tenant"

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "runtimeclass.yaml", "placeholder-pod-policy.yaml",
		filepath.Join("webhook", "rbac.yaml"), filepath.Join("controller", "serviceaccount.yaml")); err != nil {
		return err
	}
	log := zap.New(zap.UseDevMode(false))
	ctrllog.SetLogger(log)
	if err := cp.StartWebhook(ctx, webhook.DefaultOptions(), log); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	// The tenant may look at pools and classes (sandbox-pool-viewer), and write pods and
	// events in its own namespace.
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "attack-tenant-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandbox-pool-viewer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tenant-1"}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// (The aggregated ClusterRole edit gets its rules from kube-controller-manager, which does
	// not run here: the tenant's Role names what it needs.)
	if _, err := kube.RbacV1().Roles(tenantNS).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "attack-tenant-pods"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "create", "update", "delete"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kube.RbacV1().RoleBindings(tenantNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "attack-tenant-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "attack-tenant-pods"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tenant-1"}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// No controller-manager runs here to make the namespaces' default service accounts, which
	// the ServiceAccount admission plugin wants for every pod that is not a mirror pod.
	for _, ns := range []string{tenantNS, v1alpha1.DefaultPodNamespace} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// The nodes, which the Lease identities' tokens are bound to.
	nodeUIDs := map[string]types.UID{}
	for _, n := range []string{nodeA, nodeB, nodeC} {
		node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		nodeUIDs[n] = node.UID
	}
	boundTo := func(node string) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: nodeUIDs[node]}
	}

	ids = map[string]*identity{}
	certs := map[string][]string{
		nodeA:     {"system:node:node-a", "system:nodes", "system:authenticated"},
		nodeB:     {"system:node:node-b", "system:nodes", "system:authenticated"},
		oper:      {"olivia", v1alpha1.OperatorGroup, "system:authenticated"},
		tenant:    {"tenant-1", "tenants", "system:authenticated"},
		admin:     {"alice-admin", "system:masters", "system:authenticated"},
		strayNode: {"mallory", "system:nodes", "system:authenticated"},
	}
	tokens := map[string][2]string{
		ctrl:         {v1alpha1.DefaultSystemNamespace, "sandbox-pool-controller"},
		straySA:      {v1alpha1.DefaultLeaseNamespace, "intruder"},
		podGC:        {metav1.NamespaceSystem, "pod-garbage-collector"},
		leaseUnbound: {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeA},
	}
	bound := map[string][3]string{
		leaseA:    {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeA, nodeA},
		leaseB:    {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeB, nodeB},
		leaseAasB: {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeA, nodeB},
		leaseC:    {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeC, nodeC},
	}
	for name, sa := range bound {
		cfg, err := cp.ServiceAccountConfigBoundTo(ctx, sa[0], sa[1], boundTo(sa[2]))
		if err != nil {
			return err
		}
		if ids[name], err = newIdentity("system:serviceaccount:"+sa[0]+":"+sa[1], cfg); err != nil {
			return err
		}
	}
	for name, c := range certs {
		cfg, err := cp.AddUser(c[0], c[1:]...)
		if err != nil {
			return err
		}
		if ids[name], err = newIdentity(c[0], cfg); err != nil {
			return err
		}
	}
	for name, sa := range tokens {
		cfg, err := cp.ServiceAccountConfig(ctx, sa[0], sa[1])
		if err != nil {
			return err
		}
		if ids[name], err = newIdentity("system:serviceaccount:"+sa[0]+":"+sa[1], cfg); err != nil {
			return err
		}
	}
	return waitForNodePolicy(ctx)
}

// waitForNodePolicy returns once the API server enforces the policies of deploy/rbac and
// deploy/placeholder-pod-policy.yaml, which reach its admission a moment after they are
// applied: dry runs of a forged Lease, a forged event, an event in the controller's name, a
// token for another node's Lease identity and a pod with the pool's labels are refused.
func waitForNodePolicy(ctx context.Context) error {
	forgedLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(nodeB)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeA)}}
	forgedEvent := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, EventTime: metav1.NowMicro(),
		ReportingController: v1alpha1.FieldManagerAgent, ReportingInstance: nodeA, Action: "Probe", Reason: "Probe", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPool, Name: naming.PoolName(nodeB)}}
	asController := forgedEvent.DeepCopy()
	asController.ReportingController = v1alpha1.FieldManagerController
	forgedPod := placeholderPod(tenantNS, "probe", nodeA, false, true, "")
	forgedToken := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeB}}}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, leaseErr := ids[leaseA].kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Create(ctx, forgedLease, dryRun)
		_, eventErr := ids[nodeA].kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, forgedEvent, dryRun)
		_, ctrlErr := ids[admin].kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, asController, dryRun)
		_, podErr := ids[tenant].kube.CoreV1().Pods(tenantNS).Create(ctx, forgedPod, dryRun)
		_, tokenErr := ids[leaseA].kube.CoreV1().ServiceAccounts(v1alpha1.DefaultLeaseNamespace).CreateToken(ctx, v1alpha1.LeaseServiceAccountPrefix+nodeA, forgedToken, metav1.CreateOptions{})
		return apierrors.IsForbidden(leaseErr) && apierrors.IsForbidden(eventErr) && apierrors.IsForbidden(ctrlErr) &&
			apierrors.IsForbidden(podErr) && apierrors.IsForbidden(tokenErr), nil
	})
}

func newIdentity(user string, cfg *rest.Config) (*identity, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", user, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", user, err)
	}
	return &identity{user: user, cfg: cfg, kube: kube, dyn: dyn}, nil
}
