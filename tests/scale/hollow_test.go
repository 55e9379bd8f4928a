package scale

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestHollowNodes checks the harness of make bench-scale on a few nodes: every hollow node
// writes as itself (the audit log names system:node:<node> for its pods and its pool's
// status, and its Lease identity for its Lease; the fleet's shared reader writes nothing),
// the hollow kubelet makes a DaemonSet's pods Ready as it makes the pools' placeholder pods
// Ready, and the control plane's counters are read back for each phase.
func TestHollowNodes(t *testing.T) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	const n = 4
	c := newHollowCluster(t, n, clusterOptions{audit: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	began := time.Now()
	o := hollowOptions{renew: time.Second, ttl: 4 * time.Second, workers: 4}

	c.startHollow(t, "hollow-nodes-ds", o)
	c.startKCM(t)
	c.startScheduler(t)
	obs := newObserver(ctx, t, c.e.admin)
	p := &phaseRunner{t: t, ctx: ctx, c: c, obs: obs, limit: 40 * time.Second}
	ds := p.run(sideDS, "create", "create → all pods Ready", n, func() {
		if err := c.e.admin.Create(ctx, benchDaemonSet("100%")); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		k, all := obs.podsWhere(func(pod *corev1.Pod) bool { return podRunningAndReady(pod) })
		return unless(k == n && all == n, "%d of %d DaemonSet pods Ready (%d pods)", k, n, all)
	})
	c.stop("kube-controller-manager")
	c.stop("kube-scheduler")
	c.stop("hollow-nodes-ds")

	c.mintLeaseTokens(t)
	c.startHollow(t, "hollow-nodes-pool", o)
	c.startPoolController(t, o.ttl)
	pool := p.run(sidePool, "create", "create → all pools Ready", n, func() {
		if err := c.e.admin.Create(ctx, wrappers.MakeClass("hollow").Selector("pool", "scale").Resources("500m", "256Mi").Obj()); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		k, all := obs.poolsWhere(func(p *v1alpha1.SandboxPool) bool { return p.Status.Phase == v1alpha1.PhaseReady })
		return unless(k == n, "%d of %d pools Ready (%d pools)", k, n, all)
	})
	// A few renewal intervals at rest: every node renews its Lease.
	steady := p.timed(sidePool, n, 3*o.renew)

	for _, ph := range []*phaseResult{ds, pool} {
		if !ph.reached {
			t.Fatalf("%s %s: the hollow nodes did not get there", ph.side, ph.name)
		}
		t.Logf("%s", ph.line(&scaleRun{}))
	}
	// The counters, read back: each phase saw the writes its objects need.
	for _, want := range []struct {
		ph  *phaseResult
		key string
	}{{ds, "POST pods"}, {ds, "PUT pods/status"}, {pool, "POST sandboxpools"}, {pool, "POST leases"}, {pool, "POST pods"},
		{pool, "PUT pods/status"}, {pool, "APPLY sandboxpools/status"}, {steady, renewal}} {
		if got := want.ph.cost.requests[want.key]; got < n {
			t.Errorf("%s %s: the API server counted %.0f %q, want at least one per node (%d); all: %v", want.ph.side, want.ph.name, got, want.key, n, want.ph.cost.requests)
		}
	}
	for _, ph := range []*phaseResult{ds, pool} {
		if ph.cost.etcdBytes <= 0 || total(ph.cost.watch, nil) < n || ph.cost.cpu["kube-apiserver"] <= 0 || ph.cost.cpu["etcd"] <= 0 {
			t.Errorf("%s %s: etcd WAL bytes %.0f, watch events %v, CPU %v: want each read back", ph.side, ph.name, ph.cost.etcdBytes, ph.cost.watch, ph.cost.cpu)
		}
	}

	// Who wrote what: each node as itself, for both sides.
	events, err := framework.AuditEvents(c.e.cp.AuditLog(), began, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type write struct{ user, what string }
	seen := map[write]bool{}
	var firstPool []string
	for _, ev := range events {
		if ev.ObjectRef.Name == "placeholder-"+c.names[0] && ev.ObjectRef.Resource == "sandboxpools" {
			firstPool = append(firstPool, fmt.Sprintf("%s %s/%s by %s (%d)", ev.StageTimestamp.Format("15:04:05.000"), ev.Verb,
				ev.ObjectRef.Subresource, ev.User.Username, ev.ResponseStatus.Code))
		}
		if ev.User.Username == "hollow-nodes-reader" {
			t.Errorf("the fleet's shared reader wrote: %s %s %s/%s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
		}
		if ev.ResponseStatus.Code >= 300 {
			continue
		}
		what := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			what += "/" + ev.ObjectRef.Subresource
		}
		seen[write{ev.User.Username, ev.ObjectRef.Namespace + " " + what}] = true
	}
	t.Logf("the writes of pool placeholder-%s:\n%s", c.names[0], strings.Join(firstPool, "\n"))
	for _, node := range c.names {
		nodeUser := "system:node:" + node
		leaseUser := "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + node
		for _, w := range []write{
			{nodeUser, dsNamespace + " update pods/status"},                  // the DaemonSet's pod
			{nodeUser, v1alpha1.DefaultPodNamespace + " create pods"},        // the placeholder's mirror pod
			{nodeUser, v1alpha1.DefaultPodNamespace + " update pods/status"}, // and its status
			{nodeUser, " patch sandboxpools/status"},                         // the agent's status
			{leaseUser, v1alpha1.DefaultLeaseNamespace + " create leases"},   // the agent's Lease
			{leaseUser, v1alpha1.DefaultLeaseNamespace + " update leases"},   // renewed
		} {
			if !seen[w] {
				t.Errorf("the audit log has no %q by %s", w.what, w.user)
			}
		}
	}
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

// fairUser returns a client configuration for name in groups, bound to cluster-admin, so
// that API Priority and Fairness classifies it as a real cluster would the component it
// plays (kube-controller-manager by its user name), not as exempt system:masters.
func fairUser(t testing.TB, e *env, name string, groups ...string) *rest.Config {
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
