// Package agent tests placeholder-agent on a real API server (with the Node authorizer and
// the NodeRestriction admission plugin, as real clusters run them) as the node's own
// identity with the RBAC of deploy/rbac, renewing its Leases as the node's per-node service
// account (--lease-kubeconfig, which NodeRestriction makes necessary), against a
// real node-ctl process on real cgroups (root; CI runs as root). kubelet and the placeholder
// shim are played by a stand-in (kubelet_test.go) that turns the manifest into a mirror pod
// and calls the agent's shim API over TTRPC; tests/e2e runs the real ones.
package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/agent"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

var (
	suite  framework.Suite
	scheme *runtime.Scheme
	admin  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp, framework.WithNodeAuthorizer(), framework.WithNodeRestriction(), framework.WithAuditLog()))
}

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true)))
	var err error
	if scheme, err = agent.Scheme(); err != nil {
		return err
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1
	if admin, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "runtimeclass.yaml"); err != nil {
		return err
	}
	// The Priority admission plugin resolves a mirror pod's priorityClassName and rejects a
	// priority that does not match: the pools carry both, as the controller resolves them.
	return admin.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-high"}, Value: 1000})
}

// testNode is one node: a manifest directory, a real node-ctl and (when started) an agent.
type testNode struct {
	t           *testing.T
	name        string
	manifestDir string
	shimAddr    string
	stateFile   string
	stopMarker  string
	nc          *nodectltest.Process
	cfg         *rest.Config // the node's identity: system:node:<name>
	// leaseKubeconfig is the node's Lease identity, its per-node service account.
	leaseKubeconfig string
	cancel          context.CancelFunc
	done            chan error
}

// newNode starts a real node-ctl (zone z1) for a node; the agent is started separately.
func newNode(t *testing.T, name string) *testNode {
	cp := suite.Require(t)
	dir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &testNode{t: t, name: name, manifestDir: filepath.Join(dir, "manifests"), shimAddr: filepath.Join(dir, "a.sock"),
		stateFile: filepath.Join(dir, "state", "agent.json"), stopMarker: filepath.Join(dir, "node-ctl-stopped")}
	if err := os.Mkdir(n.manifestDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.nc = nodectltest.Start(t, nodectltest.Options{Zone: "z1"})
	if err := registerNode(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	if n.cfg, err = cp.AddUser(nodeUser(name), "system:nodes", "system:authenticated"); err != nil {
		t.Fatal(err)
	}
	if n.leaseKubeconfig, err = cp.KubeconfigFor(dir, leaseUser(name), leaseGroups...); err != nil {
		t.Fatal(err)
	}
	return n
}

// options are the agent's defaults with the timers shortened and everything local.
func (n *testNode) options() agent.Options {
	o := agent.DefaultOptions()
	o.NodeName = n.name
	o.ManifestDir = n.manifestDir
	o.PauseImage = "registry.test/pause:1"
	o.NodeCtlSocket, o.NodeCtlConfig = n.nc.SocketPath, n.nc.ConfigPath
	o.NodeCtlRestartCommand = ""
	// Stopping is recorded, not done: the test sees the agent call it with node-ctl's PID.
	o.NodeCtlStopCommand = "echo $NODECTL_PID >> " + n.stopMarker
	o.NodeCtlPollInterval = 200 * time.Millisecond
	o.LeaseRenewInterval, o.LeaseTTL = time.Second, 4*time.Second
	o.LeaseKubeconfig = n.leaseKubeconfig
	o.ManifestVerifyInterval = time.Second
	o.DeferredWarningAfter = 2 * time.Second
	o.ShimAddress = n.shimAddr
	o.StateFile = n.stateFile
	o.HealthzAddr, o.MetricsAddr = "0", "0"
	o.Version = "test"
	return o
}

// startAgent runs the agent until stopAgent or the end of the test.
func (n *testNode) startAgent(mutate ...func(*agent.Options)) {
	n.t.Helper()
	o := n.options()
	for _, m := range mutate {
		m(&o)
	}
	a, err := agent.New(n.cfg, o)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- a.Run(ctx) }()
	n.t.Cleanup(n.stopAgent)
}

func (n *testNode) stopAgent() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		n.t.Errorf("agent did not stop within 30 s")
	}
	n.cancel = nil
}

// syncedPool creates a 500m/64Mi pool for n (deleted at the end of the test) and waits
// until the agent has realised it.
func syncedPool(t *testing.T, n *testNode) *v1alpha1.SandboxPool {
	t.Helper()
	ctx := context.Background()
	pool := wrappers.MakePool(n.name).Class("c1").Resources("500m", "64Mi").RuntimeClass("placeholder").Obj()
	if err := admin.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, pool) })
	synced(t, n, pool.Name, "64Mi")
	return pool
}

func getPool(t *testing.T, name string) *v1alpha1.SandboxPool {
	t.Helper()
	var p v1alpha1.SandboxPool
	if err := admin.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	support.Eventually(t, what, within, 25*time.Millisecond, cond)
}

// nodeUser is the identity of node: kubelet's, which the agent shares.
func nodeUser(node string) string { return "system:node:" + node }

// leaseUser is the per-node service account that renews node's Leases, as a service-account
// token authenticates it; leaseGroups are its groups.
func leaseUser(node string) string {
	return "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + node
}

var leaseGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + v1alpha1.DefaultLeaseNamespace, "system:authenticated"}
