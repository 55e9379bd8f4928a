// Package attack tries every write by which one party could speak for another, with real
// identities against a real API server, and checks that each forged write is refused by
// the layer meant to refuse it and each legitimate one allowed:
//
//   - the API server runs the Node authorizer and RBAC, as real clusters do, but not the
//     NodeRestriction admission plugin, so that the node admission policy
//     (deploy/rbac/node-policy.yaml) alone holds the nodes' own identities to their own
//     pool's Lease (NodeRestriction would refuse them every Lease outside kube-node-lease);
//   - deploy/'s namespaces, RBAC, node admission policy and webhook configuration are
//     applied, and the admission webhook runs in this process with the default install's
//     identities;
//   - two nodes authenticate with client certificates (system:node:<node> in system:nodes),
//     their Lease identities, the controller and a stray service account with tokens the
//     API server issued (TokenRequest), an operator, a tenant and a cluster admin with
//     client certificates.
//
// The results are the table in docs/webhook.md ("Who may write what"): the test fails when
// the table there differs from what it measured; SANDBOXPOOL_UPDATE_DOCS=1 rewrites it.
package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// identity is one caller: its user name as the API server sees it, and its clients.
type identity struct {
	user string
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
)

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", filepath.Join("webhook", "rbac.yaml"), filepath.Join("controller", "serviceaccount.yaml")); err != nil {
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
	// The tenant may look at pools and classes (sandbox-pool-viewer) and nothing more.
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "attack-tenant-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandbox-pool-viewer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tenant-1"}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}

	certs := map[string][]string{
		nodeA:     {"system:node:node-a", "system:nodes", "system:authenticated"},
		nodeB:     {"system:node:node-b", "system:nodes", "system:authenticated"},
		oper:      {"olivia", v1alpha1.OperatorGroup, "system:authenticated"},
		tenant:    {"tenant-1", "tenants", "system:authenticated"},
		admin:     {"alice-admin", "system:masters", "system:authenticated"},
		strayNode: {"mallory", "system:nodes", "system:authenticated"},
	}
	tokens := map[string][2]string{
		leaseA:  {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeA},
		leaseB:  {v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix + nodeB},
		ctrl:    {v1alpha1.DefaultSystemNamespace, "sandbox-pool-controller"},
		straySA: {v1alpha1.DefaultLeaseNamespace, "intruder"},
	}
	ids = map[string]*identity{}
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

// waitForNodePolicy returns once the API server enforces both node policies, which reach
// its admission a moment after they are applied: dry runs of a forged Lease and a forged
// event are refused.
func waitForNodePolicy(ctx context.Context) error {
	forgedLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(nodeB)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeA)}}
	forgedEvent := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, EventTime: metav1.NowMicro(),
		ReportingController: v1alpha1.FieldManagerAgent, ReportingInstance: nodeA, Action: "Probe", Reason: "Probe", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPool, Name: naming.PoolName(nodeB)}}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, leaseErr := ids[leaseA].kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Create(ctx, forgedLease, dryRun)
		_, eventErr := ids[nodeA].kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, forgedEvent, dryRun)
		return apierrors.IsForbidden(leaseErr) && apierrors.IsForbidden(eventErr), nil
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
	return &identity{user: user, kube: kube, dyn: dyn}, nil
}
