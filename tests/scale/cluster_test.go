package scale

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/hollow"
	"github.com/agentcube/sandboxpool/tests/support"
)

// hollowCluster is a real etcd + kube-apiserver with the API server's own node admission
// (the Node authorizer, NodeRestriction), deploy/'s RBAC and admission policies (the nodes'
// and the placeholder pods'), the webhook as its own process, N Node objects, and every node's identities: its own
// (system:node:<name>, a static token) and its Lease identity (its service account, a token
// bound to its Node). Each side of the comparison then starts its own hollow-nodes process
// (startHollow) and its controller: kube-controller-manager (startKCM) or the SandboxPool
// controller (startPoolController).
type hollowCluster struct {
	e     *env
	cs    kubernetes.Interface
	names []string
	ids   map[string]hollow.Identity
	// procs are the measured processes by name: kube-apiserver, etcd, webhook, and the
	// running hollow nodes and controllers.
	procs map[string]*support.Proc
	pids  map[string]int
	bins  map[string]string
}

// clusterOptions configure newHollowCluster.
type clusterOptions struct {
	audit bool // an audit log of every write (framework.WithAuditLog)
}

// hollowLabel selects the hollow nodes: the class's and the DaemonSet's selector.
var hollowLabel = map[string]string{"pool": "scale"}

func newHollowCluster(t testing.TB, n int, o clusterOptions) *hollowCluster {
	t.Helper()
	names := hollow.NodeNames("hollow", n)
	ids, err := hollow.NodeTokens(names)
	if err != nil {
		t.Fatal(err)
	}
	tokenDir := t.TempDir()
	tokenFile := filepath.Join(tokenDir, "tokens.csv")
	if err := hollow.WriteTokenFile(tokenFile, ids); err != nil {
		t.Fatal(err)
	}
	opts := []framework.Option{framework.WithTokenFile(tokenFile), framework.WithNodeAuthorizer(), framework.WithNodeRestriction()}
	if o.audit {
		opts = append(opts, framework.WithAuditLog())
	}
	cp, err := framework.Start(opts...)
	framework.Require(t, cp, err)
	t.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(t, cp)
	// The placeholder pods' policy holds the nodes to their own mirror pods: the hollow
	// kubelet creates them as each node.
	if err := cp.ApplyDeploy(context.Background(), "placeholder-pod-policy.yaml"); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(e.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	c := &hollowCluster{e: e, cs: cs, names: names, ids: ids, procs: map[string]*support.Proc{}, pids: map[string]int{}, bins: map[string]string{}}
	if c.pids["kube-apiserver"], err = cp.APIServerPID(); err != nil {
		t.Fatal(err)
	}
	if c.pids["etcd"], err = cp.EtcdPID(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := hollow.CreateNodes(ctx, e.admin, names, hollowLabel, 64); err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"./cmd/hollow-nodes", "./cmd/sandboxpool-controller", "./cmd/sandboxpool-webhook"} {
		bin, err := support.BuildBinary(cp.Root, e.dir, pkg)
		if err != nil {
			t.Fatal(err)
		}
		c.bins[filepath.Base(pkg)] = bin
	}
	c.startWebhook(t)
	for _, args := range [][]string{{"create", "namespace", dsNamespace}, {"create", "serviceaccount", "default", "-n", dsNamespace}} {
		if _, stderr, err := cp.Kubectl(ctx, nil, args...); err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, stderr)
		}
	}
	return c
}

// mintLeaseTokens gives every node its Lease identity's token, bound to its Node as it is
// now (a Node deleted and created again needs a new one).
func (c *hollowCluster) mintLeaseTokens(t testing.TB) {
	t.Helper()
	if err := hollow.MintLeaseTokens(context.Background(), c.cs, c.ids, 4*3600, 64); err != nil {
		t.Fatal(err)
	}
}

// startWebhook runs the webhook binary as its own process and registers deploy/webhook's
// configuration with the API server, as deploy/ installs it.
func (c *hollowCluster) startWebhook(t testing.TB) {
	t.Helper()
	wo := envtest.WebhookInstallOptions{Paths: []string{filepath.Join(c.e.cp.Root, "deploy", "webhook")}}
	if err := wo.PrepWithoutInstalling(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wo.Cleanup() })
	kc, err := c.e.cp.KubeconfigFor(c.e.dir, "bench-webhook", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	health := support.FreeAddr(t)
	p := support.StartProcess(t, "webhook", c.bins["sandboxpool-webhook"], "--kubeconfig", kc,
		"--addr", net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)), "--cert-dir", wo.LocalServingCertDir,
		"--metrics-addr", support.FreeAddr(t), "--health-addr", health, "--controller-usernames", controllerUser)
	support.Eventually(t, "webhook ready", 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		code, body := support.HTTPGet("http://" + health + "/readyz")
		return code == http.StatusOK, body
	})
	if err := wo.Install(c.e.cp.Config); err != nil {
		t.Fatal(err)
	}
	c.track("webhook", p)
}

func (c *hollowCluster) track(name string, p *support.Proc) {
	c.procs[name], c.pids[name] = p, p.Pid()
}

func (c *hollowCluster) untrack(name string) {
	delete(c.procs, name)
	delete(c.pids, name)
}

// hollowOptions configure startHollow.
type hollowOptions struct {
	renew, ttl time.Duration
	workers    int
	logLevel   string // the process's --zap-log-level
}

// startHollow runs the hollow nodes as their own process (cmd/hollow-nodes) with every
// node's identities, and waits until all have started. It returns the address of their
// control endpoint.
func (c *hollowCluster) startHollow(t testing.TB, name string, o hollowOptions) string {
	t.Helper()
	idFile := filepath.Join(c.e.dir, name+"-identities")
	if err := hollow.WriteIdentities(idFile, c.ids); err != nil {
		t.Fatal(err)
	}
	// The shared cache's reads (one list and watch of pools, one of bound pods) are the
	// fleet's; every write is a node's own.
	kc, err := c.e.cp.KubeconfigFor(c.e.dir, "hollow-nodes-reader", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	if o.logLevel == "" {
		o.logLevel = "error"
	}
	ctl := support.FreeAddr(t)
	p := support.StartProcess(t, name, c.bins["hollow-nodes"], "--kubeconfig", kc, "--identities", idFile,
		"--nodes", strconv.Itoa(len(c.names)), "--node-prefix", "hollow", "--create-nodes=false", "--dir", shmDir(t),
		"--control-addr", ctl, "--lease-renew-interval", o.renew.String(), "--lease-ttl", o.ttl.String(),
		"--workers", strconv.Itoa(o.workers), "--zap-log-level="+o.logLevel)
	support.Eventually(t, "hollow nodes started", 5*time.Minute, 200*time.Millisecond, func() (bool, string) {
		if !p.Running() {
			t.Fatalf("hollow-nodes exited:\n%s", p.Tail(40))
		}
		code, body := support.HTTPGet("http://" + ctl + hollow.ReadyzPath)
		return code == http.StatusOK, body
	})
	c.track(name, p)
	return ctl
}

// nodesDo asks the hollow nodes at ctl to stop or start nodes (hollow.StopPath, StartPath).
func nodesDo(t testing.TB, ctl, path string, nodes []string) {
	t.Helper()
	resp, err := http.Post("http://"+ctl+path+"?nodes="+strings.Join(nodes, ","), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", path, resp.Status)
	}
}

// startKCM runs kube-controller-manager with the controllers a DaemonSet's life needs (the
// DaemonSet controller; the pod garbage collector, which removes the pods of a deleted Node;
// the garbage collector, which removes a deleted DaemonSet's pods) as its own identity, and
// waits until their caches have synced.
func (c *hollowCluster) startKCM(t testing.TB) {
	t.Helper()
	kcm := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(kcm); err != nil {
		t.Fatalf("kube-controller-manager missing (make kube-controller-manager): %v", err)
	}
	// kube-controller-manager's own user name: its built-in FlowSchema (workload-high).
	fairUser(t, c.e, "system:kube-controller-manager", "system:authenticated")
	kc, err := c.e.cp.KubeconfigFor(c.e.dir, "system:kube-controller-manager", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	p := support.StartProcess(t, "kube-controller-manager", kcm, "--kubeconfig", kc,
		"--controllers=daemonset,podgc,garbagecollector", "--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=false", fmt.Sprintf("--kube-api-qps=%d", benchQPS), fmt.Sprintf("--kube-api-burst=%d", benchBurst))
	support.Eventually(t, "kube-controller-manager's caches synced", 3*time.Minute, 200*time.Millisecond, func() (bool, string) {
		out := p.Output()
		return strings.Contains(out, "Starting daemon sets controller") && strings.Contains(out, "Proceeding to collect garbage"), p.Tail(3)
	})
	c.track("kube-controller-manager", p)
}

// startScheduler runs kube-scheduler as its own identity: a DaemonSet's pods are created
// unbound (with an affinity to their node) and the scheduler binds them.
func (c *hollowCluster) startScheduler(t testing.TB) {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kube-scheduler missing (make kube-scheduler): %v", err)
	}
	kc, err := c.e.cp.KubeconfigFor(c.e.dir, "system:kube-scheduler", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(c.e.dir, "scheduler.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: %d, burst: %d}
leaderElection: {leaderElect: false}
`, kc, benchQPS, benchBurst), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(support.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	p := support.StartProcess(t, "kube-scheduler", bin, "--config", cfg, "--bind-address=127.0.0.1", "--secure-port="+port)
	// Its /readyz includes its informers' sync (a self-signed serving certificate).
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the scheduler's self-signed certificate, on loopback
	support.Eventually(t, "kube-scheduler ready", 3*time.Minute, 200*time.Millisecond, func() (bool, string) {
		resp, err := insecure.Get("https://127.0.0.1:" + port + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	c.track("kube-scheduler", p)
}

// startPoolController runs the sandboxpool-controller binary as its service account and
// waits until it is ready.
func (c *hollowCluster) startPoolController(t testing.TB, ttl time.Duration) {
	t.Helper()
	kc, err := c.e.cp.KubeconfigFor(c.e.dir, controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	health := support.FreeAddr(t)
	p := support.StartProcess(t, "controller", c.bins["sandboxpool-controller"], "--kubeconfig", kc, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address="+health, "--lease-ttl="+ttl.String(),
		fmt.Sprintf("--kube-api-qps=%d", benchQPS), fmt.Sprintf("--kube-api-burst=%d", benchBurst))
	support.Eventually(t, "controller ready", 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		code, body := support.HTTPGet("http://" + health + "/readyz")
		return code == http.StatusOK, body
	})
	c.track("controller", p)
}

// stop stops a tracked process.
func (c *hollowCluster) stop(name string) {
	if p := c.procs[name]; p != nil {
		_ = p.Stop(15 * time.Second)
	}
	c.untrack(name)
}

// deleteNodes deletes Node objects.
func (c *hollowCluster) deleteNodes(t testing.TB, nodes []string) {
	t.Helper()
	for _, n := range nodes {
		if err := c.cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting node %s: %v", n, err)
		}
	}
}

// recreateNodes creates Node objects again (with new UIDs).
func (c *hollowCluster) recreateNodes(t testing.TB, nodes []string) {
	t.Helper()
	if err := hollow.CreateNodes(context.Background(), c.e.admin, nodes, hollowLabel, 16); err != nil {
		t.Fatal(err)
	}
}
