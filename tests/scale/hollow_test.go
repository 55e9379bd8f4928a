package scale

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/agent/hollow"
	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestHollowNodes proves the hollow-node mode on a real API server with the real controller
// (in process, as its service account): 20 hollow nodes renew one Lease each per interval,
// their pools reach Ready through the real agent code, and stopping two agents makes exactly
// their pools' PlaceholderAgentHealthy False. It runs in make test; the sizes of the scale
// benchmarks run under SANDBOXPOOL_BENCH (make bench-scale).
func TestHollowNodes(t *testing.T) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cp, err := framework.Start()
	framework.Require(t, cp, err)
	t.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	const (
		n        = 20
		renew    = 500 * time.Millisecond
		leaseTTL = 3 * time.Second
	)
	startController(ctx, t, e, leaseTTL)
	names := hollow.NodeNames("hollow", n)
	if err := hollow.CreateNodes(ctx, e.admin, names, map[string]string{"pool": "hollow"}, 8); err != nil {
		t.Fatal(err)
	}
	nodes, err := hollow.Start(ctx, e.cp.Config, hollow.Options{Nodes: names, Dir: shmDir(t), RenewInterval: renew,
		LeaseTTL: leaseTTL, NodeCtlPollInterval: time.Second, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Create(ctx, wrappers.MakeClass("hollow").Selector("pool", "hollow").Resources("500m", "256Mi").Obj()); err != nil {
		t.Fatal(err)
	}
	support.Eventually(t, "every pool Ready", time.Minute, 100*time.Millisecond, func() (bool, string) {
		ready, state := countPhase(ctx, e, v1alpha1.PhaseReady)
		return ready == n, state
	})
	for _, node := range names {
		if gen, res := nodes.NodeCtl(node).Applied(); gen == 0 || res["memory"] != "256Mi" {
			t.Errorf("node %s: the simulated node-ctl applied generation %d, resources %v", node, gen, res)
		}
	}

	// Renewals: one per pool per interval, from a watch over a few intervals.
	w, err := e.admin.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(v1alpha1.DefaultLeaseNamespace))
	if err != nil {
		t.Fatal(err)
	}
	window := 8 * renew
	renewals := 0
	for end := time.After(window); ; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				renewals++
			}
			continue
		case <-end:
		}
		break
	}
	w.Stop()
	want := n * int(window/renew)
	t.Logf("%d Lease renewals in %s by %d hollow agents (one per %s: %d)", renewals, window, n, renew, want)
	if renewals < want/2 || renewals > want*3/2 {
		t.Errorf("%d Lease renewals in %s, want about %d (one per pool per %s)", renewals, window, want, renew)
	}

	// Two agents stop: exactly their pools lose PlaceholderAgentHealthy.
	stopped := names[:2]
	for _, node := range stopped {
		nodes.StopAgent(node)
	}
	took := support.Eventually(t, "stopped agents' pools unhealthy", time.Minute, 100*time.Millisecond, func() (bool, string) {
		unhealthy := unhealthyPools(ctx, e)
		return len(unhealthy) == len(stopped) && unhealthy[naming.PoolName(stopped[0])] && unhealthy[naming.PoolName(stopped[1])],
			fmt.Sprintf("unhealthy: %v", unhealthy)
	})
	t.Logf("stopped agents detected after %s (TTL %s)", took.Round(time.Millisecond), leaseTTL)
}

// setUpCluster applies deploy/'s namespaces, RBAC, RuntimeClass and the controller's
// FlowSchema, and creates the default service account the mirror pods need (no
// controller-manager creates it).
func setUpCluster(t testing.TB, cp *framework.ControlPlane) *env {
	t.Helper()
	s, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1
	admin, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "runtimeclass.yaml", "controller/flowschema.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := cp.Kubectl(ctx, nil, "create", "serviceaccount", "default", "-n", v1alpha1.DefaultPodNamespace); err != nil {
		t.Fatalf("default service account: %v: %s", err, stderr)
	}
	dir, err := os.MkdirTemp("", "sandboxpool-scale-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return &env{cp: cp, admin: admin, scheme: s, dir: dir}
}

// startController runs the controller in this process as its service account.
func startController(ctx context.Context, t testing.TB, e *env, leaseTTL time.Duration) {
	t.Helper()
	cfg, err := e.cp.AddUser(controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	o := operator.DefaultOptions()
	o.LeaseTTL = leaseTTL
	o.MetricsAddr, o.ProbeAddr, o.LeaderElection = "0", "0", false
	mgr, err := operator.NewManager(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
}

// shmDir is a scratch directory on tmpfs when there is one.
func shmDir(t testing.TB) string {
	t.Helper()
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "hollow-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// countPhase counts the pools in phase, and describes the phases seen.
func countPhase(ctx context.Context, e *env, phase v1alpha1.SandboxPoolPhase) (int, string) {
	var pools v1alpha1.SandboxPoolList
	if err := e.admin.List(ctx, &pools); err != nil {
		return 0, err.Error()
	}
	by := map[v1alpha1.SandboxPoolPhase]int{}
	example := ""
	for _, p := range pools.Items {
		by[p.Status.Phase]++
		if p.Status.Phase != phase && example == "" {
			for _, c := range p.Status.Conditions {
				example += fmt.Sprintf(" %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
			}
			example = p.Name + ":" + example
		}
	}
	return by[phase], fmt.Sprintf("%d pools by phase: %v; %s", len(pools.Items), by, example)
}

// unhealthyPools are the pools whose PlaceholderAgentHealthy is False.
func unhealthyPools(ctx context.Context, e *env) map[string]bool {
	var pools v1alpha1.SandboxPoolList
	out := map[string]bool{}
	if err := e.admin.List(ctx, &pools); err != nil {
		return out
	}
	for _, p := range pools.Items {
		if meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) {
			out[p.Name] = true
		}
	}
	return out
}

// TestHollowNodesCommand runs cmd/hollow-nodes as its own process with its own kubeconfig:
// it creates the Node objects, and its five hollow nodes' pools reach Ready. The controller
// is a process too (a second in-process manager would reuse TestHollowNodes' controller
// names, which controller-runtime refuses).
func TestHollowNodesCommand(t *testing.T) {
	cp, err := framework.Start()
	framework.Require(t, cp, err)
	t.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(t, cp)
	ctx := context.Background()
	startControllerProcess(t, e, 4*time.Second)
	bin, err := support.BuildBinary(cp.Root, e.dir, "./cmd/hollow-nodes")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := cp.KubeconfigFor(e.dir, "hollow-nodes", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	support.StartProcess(t, "hollow-nodes", bin, "--kubeconfig", kc, "--nodes=5", "--node-prefix=cmd",
		"--node-label=pool=cmd", "--lease-renew-interval=1s", "--lease-ttl=4s", "--dir", shmDir(t), "--churn=30")
	if err := e.admin.Create(ctx, wrappers.MakeClass("cmd").Selector("pool", "cmd").Resources("250m", "128Mi").Obj()); err != nil {
		t.Fatal(err)
	}
	support.Eventually(t, "the command's five pools Ready", time.Minute, 100*time.Millisecond, func() (bool, string) {
		ready, state := countPhase(ctx, e, v1alpha1.PhaseReady)
		return ready == 5, state
	})
}

// fairUser returns a client configuration for name in groups, bound to cluster-admin, so
// that API Priority and Fairness classifies it as a real cluster would the component it
// plays (kube-controller-manager by its user name), not as exempt system:masters.
func fairUser(t *testing.T, e *env, name string, groups ...string) *rest.Config {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strings.ReplaceAll(name, ":", "-")},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}}
	if err := e.admin.Create(context.Background(), crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := e.cp.AddUser(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
