// Package stack runs the whole SandboxPool system on one machine, as local processes with
// their own directories and sockets: etcd and kube-apiserver (envtest, with the Node
// authorizer and the default admission plugins), the CRDs, RBAC, RuntimeClass and webhook configuration
// of deploy/, the admission webhook and the controller under their own identities, and one
// node — containerd 2.4.2 with the placeholder runtime handler, the placeholder shim, the
// reference node-ctl on a real cgroup, the placeholder agent and a real kubelet, the last
// two as the node's identity system:node:<name>.
//
// The end-to-end tests (tests/e2e) and `make demo` (hack/demo) both run it. It needs root;
// Tools.Unavailable says why it cannot run elsewhere.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentcube/sandboxpool/hack/pause/image"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// Identities of the control-plane components (deploy/rbac binds their roles).
const (
	ControllerUser = "system:serviceaccount:" + v1alpha1.DefaultSystemNamespace + ":sandbox-pool-controller"
	WebhookUser    = "system:serviceaccount:" + v1alpha1.DefaultSystemNamespace + ":sandbox-pool-webhook"
)

// Timers are the components' timers. Tests shorten the ones of minutes.
type Timers struct {
	NodeCtlPollInterval    time.Duration // agent --node-ctl-poll-interval
	ManifestVerifyInterval time.Duration // agent --manifest-verify-interval
	LeaseRenewInterval     time.Duration // agent --lease-renew-interval
	LeaseTTL               time.Duration // agent and controller --lease-ttl
	DeferredWarningAfter   time.Duration // agent --resize-deferred-warning-after
	NodeCtlUnreadyAfter    time.Duration // controller --nodectl-unready-after
	FinalizerTimeout       time.Duration // controller --finalizer-timeout
}

// DefaultTimers are the components' defaults, with node-ctl polled every 2 s instead of 5 s
// so that a demo shows changes promptly.
func DefaultTimers() Timers {
	return Timers{
		NodeCtlPollInterval: 2 * time.Second, ManifestVerifyInterval: 30 * time.Second,
		LeaseRenewInterval: 10 * time.Second, LeaseTTL: 40 * time.Second, DeferredWarningAfter: 10 * time.Minute,
		NodeCtlUnreadyAfter: 5 * time.Minute, FinalizerTimeout: 10 * time.Minute,
	}
}

// Options configure Start.
type Options struct {
	// Dir holds everything of this stack; keep it short (unix socket paths). Created.
	Dir string
	// NodeName is the node's name; NodeLabels are set by kubelet when it registers.
	NodeName   string
	NodeLabels map[string]string
	// Zone is node-ctl's --zone.
	Zone string
	// Tools locate kube-apiserver, etcd, kubectl, kubelet and containerd.
	Tools Tools
	// Bin holds the project's binaries (placeholder-agent, sandboxpool-controller,
	// sandboxpool-webhook, node-ctl, containerd-shim-placeholder-v2); empty: built into
	// Dir/bin with `go build`.
	Bin string
	// Timers of the components.
	Timers Timers
	// NodeRestriction adds the NodeRestriction admission plugin to the API server, as
	// production clusters run it. A node identity may then write no Lease but its own in
	// kube-node-lease; the agent renews its pools' Leases as its per-node service account
	// (--lease-kubeconfig), as it always does here.
	NodeRestriction bool
	// Logf reports progress; nil discards it.
	Logf func(format string, args ...any)
}

// Stack is a running system.
type Stack struct {
	Opts Options
	// CP is the control plane; Admin is a cluster-admin client configuration.
	CP    *framework.ControlPlane
	Admin *rest.Config
	// Kubeconfig is a cluster-admin kubeconfig file for kubectl.
	Kubeconfig string
	// LogDir holds one log file per process.
	LogDir string
	// The components: node-ctl and the agent under a supervisor that plays their systemd
	// units (Restart=always).
	Webhook, Controller, Containerd, Kubelet *Proc
	NodeCtl, Agent                           *Unit
	// CgroupRoot is kubelet's cgroupRoot; NodeCtlCgroup is node-ctl's cgroup.
	CgroupRoot, NodeCtlCgroup string
	// Network is the node's CNI network.
	Network network

	id    string
	paths nodePaths
	bin   string
	kube  *kubernetes.Clientset

	// envtestDirs are the control plane's temporary directories (for the state file).
	envtestDirs []string
	// ready is set once Start has succeeded.
	ready bool

	link         *link  // the node's path to the API server
	agentHealthz string // the agent's /healthz and /readyz address
	// webhookHealth is the webhook's /healthz and /readyz address.
	webhookHealth string
	// kubeletReadOnly is kubelet's read-only port on loopback (host:port).
	kubeletReadOnly     string
	kubeletReadOnlyPort int
	// leaseKubeconfig is the agent's Lease identity: the per-node service account
	// sandbox-pool-node-lease/placeholder-agent-<node>.
	leaseKubeconfig string

	supervise   context.CancelFunc // stops the units' supervisors
	supervisors sync.WaitGroup
	stopOnce    sync.Once
}

// Start starts everything and waits until the node is Ready. On error, whatever started
// is stopped again.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Timers == (Timers{}) {
		o.Timers = DefaultTimers()
	}
	if why := o.Tools.Unavailable(); why != "" {
		return nil, errors.New(why)
	}
	if o.Dir == "" || o.NodeName == "" {
		return nil, errors.New("stack: Dir and NodeName are required")
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = abs
	id := filepath.Base(o.Dir)
	s := &Stack{
		Opts: o, LogDir: filepath.Join(o.Dir, "logs"), id: id, paths: newNodePaths(o.Dir),
		CgroupRoot: "/" + id + "-kubepods", NodeCtlCgroup: "/" + id + "-node-ctl", Network: networkFor(id),
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	// What a crash would leave outside Dir is known before it exists.
	if err := s.WriteStateFile(); err != nil {
		return nil, err
	}
	err = s.start(ctx)
	if err == nil {
		s.ready = true
		err = s.WriteStateFile()
	}
	if err != nil {
		if stopErr := s.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and stopping: %w)", err, stopErr)
		}
		return nil, err
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context) error {
	o := s.Opts
	for _, d := range []string{s.LogDir, s.paths.manifests, s.paths.nodeCtl, s.paths.kubeletRoot, s.paths.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := EnsureHostPackages(ctx, o.Logf); err != nil {
		return err
	}
	if err := s.build(ctx); err != nil {
		return err
	}

	opts := []framework.Option{framework.WithNodeAuthorizer(), framework.WithWebhooks(filepath.Join("deploy", "webhook"))}
	what := "Node authorizer, default admission plugins"
	if o.NodeRestriction {
		opts, what = append(opts, framework.WithNodeRestriction()), what+" and NodeRestriction"
	}
	o.Logf("starting etcd and kube-apiserver (%s), installing the CRDs", what)
	t0 := time.Now()
	cp, err := framework.Start(opts...)
	if err != nil {
		return err
	}
	s.CP = cp
	s.envtestDirs = []string{cp.Env.ControlPlane.APIServer.CertDir, cp.Env.ControlPlane.Etcd.DataDir, cp.Env.WebhookInstallOptions.LocalServingCertDir}
	o.Logf("control plane up in %s", time.Since(t0).Round(time.Millisecond))
	if s.Admin, err = cp.AddUser("sandboxpool-admin", "system:masters"); err != nil {
		return err
	}
	if s.Kubeconfig, err = s.writeKubeconfig("kubeconfig", "sandboxpool-admin", "system:masters"); err != nil {
		return err
	}
	if s.kube, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return err
	}
	if err := s.applyDeploy(ctx); err != nil {
		return err
	}
	if err := s.startWebhook(ctx); err != nil {
		return err
	}
	if err := s.startController(ctx); err != nil {
		return err
	}
	return s.startNode(ctx)
}

// build builds the project's binaries (unless Options.Bin has them) and the pause image.
func (s *Stack) build(ctx context.Context) error {
	s.bin = s.Opts.Bin
	if s.bin == "" {
		root, err := corpus.RepoRoot()
		if err != nil {
			return err
		}
		s.bin = filepath.Join(s.Opts.Dir, "bin")
		s.Opts.Logf("building the binaries into %s", s.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", s.bin+"/",
			"./cmd/placeholder-agent", "./cmd/sandboxpool-controller", "./cmd/sandboxpool-webhook",
			"./cmd/node-ctl", "./cmd/containerd-shim-placeholder-v2")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the binaries: %w\n%s", err, out)
		}
	}
	for _, b := range []string{"placeholder-agent", "sandboxpool-controller", "sandboxpool-webhook", "node-ctl", "containerd-shim-placeholder-v2"} {
		if _, err := os.Stat(filepath.Join(s.bin, b)); err != nil {
			return fmt.Errorf("%s missing in %s: %w", b, s.bin, err)
		}
	}
	return image.Build(ctx, s.paths.pauseArchive)
}

// applyDeploy applies what an operator applies: the namespaces, RBAC, the webhook's RBAC
// and the RuntimeClass (the CRDs and the webhook configuration are in).
func (s *Stack) applyDeploy(ctx context.Context) error {
	return s.CP.ApplyDeploy(ctx, "namespace.yaml", "rbac", filepath.Join("webhook", "rbac.yaml"), "runtimeclass.yaml")
}

func (s *Stack) startWebhook(ctx context.Context) error {
	kc, err := s.writeKubeconfig("webhook.kubeconfig", WebhookUser, "system:serviceaccounts",
		"system:serviceaccounts:"+v1alpha1.DefaultSystemNamespace, "system:authenticated")
	if err != nil {
		return err
	}
	wo := s.CP.WebhookOptions()
	health := freeAddr()
	s.Webhook = newProc("webhook", s.LogDir, filepath.Join(s.bin, "sandboxpool-webhook"), []string{
		"--kubeconfig=" + kc,
		"--addr=" + net.JoinHostPort(wo.LocalServingHost, fmt.Sprint(wo.LocalServingPort)),
		"--cert-dir=" + wo.LocalServingCertDir,
		"--metrics-addr=" + freeAddr(), "--health-addr=" + health,
	})
	s.webhookHealth = health
	s.Opts.Logf("starting the webhook as %s", WebhookUser)
	return s.StartWebhook(ctx)
}

// StartWebhook starts the webhook's process and waits until it is ready.
func (s *Stack) StartWebhook(ctx context.Context) error {
	if err := s.Webhook.Start(); err != nil {
		return err
	}
	return waitHTTP(ctx, s.Webhook, "http://"+s.webhookHealth+"/readyz", time.Minute)
}

func (s *Stack) startController(ctx context.Context) error {
	kc, err := s.writeKubeconfig("controller.kubeconfig", ControllerUser, "system:serviceaccounts",
		"system:serviceaccounts:"+v1alpha1.DefaultSystemNamespace, "system:authenticated")
	if err != nil {
		return err
	}
	t := s.Opts.Timers
	probe := freeAddr()
	s.Controller = newProc("controller", s.LogDir, filepath.Join(s.bin, "sandboxpool-controller"), []string{
		"--kubeconfig=" + kc, "--leader-elect=false",
		"--lease-ttl=" + t.LeaseTTL.String(), "--nodectl-unready-after=" + t.NodeCtlUnreadyAfter.String(),
		"--finalizer-timeout=" + t.FinalizerTimeout.String(),
		"--metrics-bind-address=" + freeAddr(), "--health-probe-bind-address=" + probe,
	})
	s.Opts.Logf("starting the controller as %s", ControllerUser)
	if err := s.Controller.Start(); err != nil {
		return err
	}
	return waitHTTP(ctx, s.Controller, "http://"+probe+"/readyz", time.Minute)
}

// startNode prepares the node (cgroup, CNI, configurations, the node's identity through
// the link) and boots it.
func (s *Stack) startNode(ctx context.Context) error {
	o, p := s.Opts, s.paths
	if err := createCgroup(s.CgroupRoot); err != nil {
		return err
	}
	if err := writeCNIConfig(p, s.Network); err != nil {
		return err
	}
	if err := writeContainerdConfig(p); err != nil {
		return err
	}
	s.kubeletReadOnly = freeAddr()
	_, port, err := net.SplitHostPort(s.kubeletReadOnly)
	if err != nil {
		return err
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	s.kubeletReadOnlyPort = portNum
	if err := writeKubeletConfig(p, s.CgroupRoot, portNum, nil); err != nil {
		return err
	}
	u, err := url.Parse(s.CP.Config.Host)
	if err != nil {
		return err
	}
	if s.link, err = newLink(u.Host); err != nil {
		return err
	}
	kc, err := s.writeKubeconfig("node.kubeconfig", "system:node:"+o.NodeName, "system:nodes", "system:authenticated")
	if err != nil {
		return err
	}
	if err := pointAt(kc, "https://"+s.link.addr); err != nil {
		return err
	}
	s.leaseKubeconfig, err = s.writeKubeconfig("lease.kubeconfig",
		"system:serviceaccount:"+v1alpha1.DefaultLeaseNamespace+":"+v1alpha1.LeaseServiceAccountPrefix+o.NodeName,
		"system:serviceaccounts", "system:serviceaccounts:"+v1alpha1.DefaultLeaseNamespace, "system:authenticated")
	if err != nil {
		return err
	}
	if err := pointAt(s.leaseKubeconfig, "https://"+s.link.addr); err != nil {
		return err
	}

	s.Containerd = newProc("containerd", s.LogDir, filepath.Join(o.Tools.Containerd, "containerd"),
		[]string{"--config", filepath.Join(p.containerd, "config.toml")},
		"PATH="+s.bin+":"+o.Tools.Containerd+":"+os.Getenv("PATH"))
	s.NodeCtl = &Unit{Proc: newProc("node-ctl", s.LogDir, filepath.Join(s.bin, "node-ctl"), []string{
		"--socket=" + p.nodeCtlSock, "--config=" + p.nodeCtlCfg, "--cgroup-path=" + s.NodeCtlCgroup, "--zone=" + o.Zone,
	}), StoppedFile: p.nodeCtlHold, PIDFile: p.nodeCtlPid}
	s.agentHealthz = freeAddr()
	s.Agent = &Unit{Proc: newProc("agent", s.LogDir, filepath.Join(s.bin, "placeholder-agent"), s.agentArgs(kc))}
	var labels []string
	for k, v := range o.NodeLabels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	args := []string{
		"--config=" + p.kubeletCfg, "--kubeconfig=" + kc, "--hostname-override=" + o.NodeName,
		"--root-dir=" + p.kubeletRoot, "--cert-dir=" + filepath.Join(p.kubeletRoot, "pki"), "--v=2",
	}
	if len(labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	s.Kubelet = newProc("kubelet", s.LogDir, filepath.Join(o.Tools.KubeAssets, "kubelet"), args)

	// Both units start stopped; BootNode starts them.
	for _, u := range []*Unit{s.NodeCtl, s.Agent} {
		if err := u.SetStopped(true); err != nil {
			return err
		}
	}
	supCtx, cancel := context.WithCancel(context.Background())
	s.supervise = cancel
	for _, u := range []*Unit{s.NodeCtl, s.Agent} {
		s.supervisors.Go(func() {
			u.supervise(supCtx, o.Logf)
		})
	}
	return s.BootNode(ctx, true)
}

// BootNode starts the node's processes in the order a booting node's services start —
// containerd, node-ctl, the agent, kubelet — and, with waitReady, waits until the agent is
// ready and the node Ready (neither happens while the API server is unreachable).
func (s *Stack) BootNode(ctx context.Context, waitReady bool) error {
	o, p := s.Opts, s.paths
	o.Logf("starting containerd %s with the placeholder runtime handler", s.Containerd.bin)
	if err := s.Containerd.Start(); err != nil {
		return err
	}
	if err := waitFor(ctx, s.Containerd, time.Minute, func() bool {
		c, err := net.Dial("unix", p.socket)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	if out, err := s.Ctr(ctx, "-n", containerdtest.CRINamespace, "images", "import", p.pauseArchive); err != nil {
		return fmt.Errorf("importing the pause image: %w: %s", err, out)
	}

	o.Logf("starting node-ctl on cgroup %s", s.NodeCtlCgroup)
	if err := s.NodeCtl.StartUnit(); err != nil {
		return err
	}
	if err := waitFor(ctx, nil, 30*time.Second, func() bool { return s.nodeCtlHealthy(ctx) }); err != nil {
		return fmt.Errorf("node-ctl not healthy: %w; its log ends:\n%s", err, s.NodeCtl.Tail(20))
	}

	o.Logf("starting the placeholder agent as system:node:%s", o.NodeName)
	if err := s.Agent.StartUnit(); err != nil {
		return err
	}
	if waitReady {
		if err := waitHTTP(ctx, nil, "http://"+s.agentHealthz+"/readyz", time.Minute); err != nil {
			return fmt.Errorf("%w; the agent's log ends:\n%s", err, s.Agent.Tail(20))
		}
	}

	o.Logf("starting kubelet as system:node:%s (staticPodPath %s)", o.NodeName, p.manifests)
	if err := s.Kubelet.Start(); err != nil {
		return err
	}
	if !waitReady {
		return nil
	}
	t0 := time.Now()
	if err := waitFor(ctx, s.Kubelet, 3*time.Minute, func() bool { return s.NodeReady(ctx) }); err != nil {
		return fmt.Errorf("node %s not Ready: %w", o.NodeName, err)
	}
	o.Logf("node %s Ready in %s", o.NodeName, time.Since(t0).Round(time.Millisecond))
	return nil
}

// ShutdownNode stops the node's processes as a shutdown does, in the reverse order, and
// leaves what a reboot leaves: no pods in containerd (removed through CRI, which stops
// ordinary pods' processes and lets the placeholder shims exit), the files on disk (the
// manifests, node-ctl's config), node-ctl's cgroup and its limits.
func (s *Stack) ShutdownNode(ctx context.Context) error {
	var errs []error
	if s.Agent != nil {
		errs = append(errs, s.Agent.StopUnit(30*time.Second))
	}
	if s.Kubelet != nil {
		errs = append(errs, s.Kubelet.Stop(30*time.Second))
	}
	if s.Containerd != nil && s.Containerd.Running() {
		if out, err := s.Crictl(ctx, "rmp", "--all", "--force"); err != nil {
			errs = append(errs, fmt.Errorf("crictl rmp: %w: %s", err, out))
		}
		errs = append(errs, s.Containerd.Stop(15*time.Second))
	}
	for pid := range containerdtest.ShimsBelow(s.paths.containerd) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if s.NodeCtl != nil {
		errs = append(errs, s.NodeCtl.StopUnit(15*time.Second))
	}
	return errors.Join(errs...)
}

// CutNodeLink makes the API server unreachable from the node (kubelet and the agent):
// connections are refused and open ones reset. The control plane keeps running.
func (s *Stack) CutNodeLink() { s.link.Cut() }

// RestoreNodeLink makes the API server reachable from the node again.
func (s *Stack) RestoreNodeLink() error { return s.link.Restore() }

// pointAt rewrites the server of every cluster in the kubeconfig at path.
func pointAt(path, server string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func (s *Stack) agentArgs(kubeconfig string) []string {
	o, p, t := s.Opts, s.paths, s.Opts.Timers
	return []string{
		"--node-name=" + o.NodeName, "--kubeconfig=" + kubeconfig, "--lease-kubeconfig=" + s.leaseKubeconfig,
		"--manifest-dir=" + p.manifests, "--pause-image=" + image.Name,
		"--node-ctl-socket=" + p.nodeCtlSock, "--node-ctl-config=" + p.nodeCtlCfg,
		// node-ctl's unit is played by the stack's supervisor: the stop command marks it
		// stopped (systemctl stop), the restart command clears the mark (systemctl restart
		// starts a stopped unit); both signal the process the stack started, by the PID the
		// supervisor wrote.
		"--node-ctl-stop-command=" + fmt.Sprintf(`touch %[1]s && kill -TERM "$(cat %[2]s)"`, p.nodeCtlHold, p.nodeCtlPid),
		"--node-ctl-restart-command=" + fmt.Sprintf(`rm -f %[1]s; pid="$(cat %[2]s)"; [ -z "$pid" ] || kill -TERM "$pid"`, p.nodeCtlHold, p.nodeCtlPid),
		"--node-ctl-poll-interval=" + t.NodeCtlPollInterval.String(),
		"--lease-renew-interval=" + t.LeaseRenewInterval.String(), "--lease-ttl=" + t.LeaseTTL.String(),
		"--manifest-verify-interval=" + t.ManifestVerifyInterval.String(),
		"--resize-deferred-warning-after=" + t.DeferredWarningAfter.String(),
		"--shim-address=" + p.agentSocket,
		"--healthz-addr=" + s.agentHealthz, "--metrics-addr=0",
	}
}

// RestartAgent stops the agent's unit and starts it again with its flags plus extra (a
// later flag wins), then waits until the agent is ready.
func (s *Stack) RestartAgent(ctx context.Context, extra ...string) error {
	if err := s.Agent.StopUnit(30 * time.Second); err != nil {
		return err
	}
	s.Agent.args = append(s.agentArgs(filepath.Join(s.Opts.Dir, "kc", "node.kubeconfig")), extra...)
	if err := s.Agent.StartUnit(); err != nil {
		return err
	}
	return waitHTTP(ctx, nil, "http://"+s.agentHealthz+"/readyz", time.Minute)
}

// AgentReady reports whether the agent answers /readyz.
func (s *Stack) AgentReady() bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + s.agentHealthz + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// NodeReady reports whether the node object exists with Ready=True.
func (s *Stack) NodeReady(ctx context.Context) bool {
	n, err := s.kube.CoreV1().Nodes().Get(ctx, s.Opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RestartKubelet stops kubelet (SIGTERM) and starts it again with systemReserved in its
// configuration (nil: none, as at the start), then waits until it serves /pods. kubelet
// admits every pod again when it starts, static ones included.
func (s *Stack) RestartKubelet(ctx context.Context, systemReserved map[string]string) error {
	if err := writeKubeletConfig(s.paths, s.CgroupRoot, s.kubeletReadOnlyPort, systemReserved); err != nil {
		return err
	}
	if err := s.Kubelet.Restart(30 * time.Second); err != nil {
		return err
	}
	return waitHTTP(ctx, s.Kubelet, s.KubeletPodsURL(), 2*time.Minute)
}

// KubeletPodsURL is kubelet's /pods on its read-only port: the pods kubelet knows, static
// pods with the status kubelet gave them (a refused one is Failed).
func (s *Stack) KubeletPodsURL() string { return "http://" + s.kubeletReadOnly + "/pods" }

// ManifestDir is kubelet's staticPodPath and the agent's --manifest-dir.
func (s *Stack) ManifestDir() string { return s.paths.manifests }

// NodeCtlSocket is node-ctl's socket.
func (s *Stack) NodeCtlSocket() string { return s.paths.nodeCtlSock }

// ContainerdSocket is containerd's GRPC (and CRI) socket.
func (s *Stack) ContainerdSocket() string { return s.paths.socket }

// Ctr runs ctr against the node's containerd.
func (s *Stack) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(s.Opts.Tools.Containerd, "ctr"), append([]string{"-a", s.paths.socket}, args...)...).CombinedOutput()
	return string(out), err
}

// Crictl runs crictl against the node's containerd and returns its standard output (its
// standard error is in the error).
func (s *Stack) Crictl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.Opts.Tools.Containerd, "crictl"),
		append([]string{"--runtime-endpoint", "unix://" + s.paths.socket, "--image-endpoint", "unix://" + s.paths.socket, "--timeout", "20s"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), err
}

// Kubectl runs kubectl as cluster admin.
func (s *Stack) Kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.Opts.Tools.Kubectl(), append([]string{"--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// writeKubeconfig writes a kubeconfig authenticating as name in groups (a client
// certificate of the control plane's CA) to Dir/kc/file.
func (s *Stack) writeKubeconfig(file, name string, groups ...string) (string, error) {
	u, err := s.CP.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(s.Opts.Dir, "kc")
	if file == "kubeconfig" {
		dir = s.Opts.Dir
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, file)
	return path, os.WriteFile(path, kc, 0o600)
}

// Stop stops everything, in the reverse order of a start, and removes what the stack
// created outside its directory (cgroups, the CNI bridge). It keeps Dir (logs).
func (s *Stack) Stop() error {
	var errs []error
	s.stopOnce.Do(func() {
		errs = append(errs, s.ShutdownNode(context.Background()))
		if s.supervise != nil {
			s.supervise()
			s.supervisors.Wait()
		}
		for _, p := range []*Proc{s.Controller, s.Webhook} {
			if p != nil {
				errs = append(errs, p.Stop(15*time.Second))
			}
		}
		if s.link != nil {
			s.link.Cut()
		}
		if s.CP != nil {
			errs = append(errs, s.CP.Stop())
		}
		unmountAll(s.Opts.Dir)
		errs = append(errs, removeCgroup(s.CgroupRoot), removeCgroup(s.NodeCtlCgroup))
		deleteLink(s.Network.Bridge)
	})
	return errors.Join(errs...)
}

// freeAddr returns a free 127.0.0.1 address.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free port: %v", err))
	}
	defer l.Close()
	return l.Addr().String()
}

// pollInterval is how often the stack's waits check their condition.
const pollInterval = 100 * time.Millisecond

func sleepPoll() { time.Sleep(pollInterval) }

// waitFor polls cond until it holds, failing when p exits first or timeout passes.
func waitFor(ctx context.Context, p *Proc, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil && !p.Running() {
			return fmt.Errorf("%s exited; its log ends:\n%s", p.Name, p.Tail(30))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("not within %s", timeout)
			if p != nil {
				msg += fmt.Sprintf("; the log of %s ends:\n%s", p.Name, p.Tail(30))
			}
			return errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	return nil
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := waitFor(ctx, p, timeout, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("not ready at %s: %w", url, err)
	}
	return nil
}

// NodeCtlClient talks to node-ctl.
func (s *Stack) NodeCtlClient() *nodectl.Client { return nodectl.New(s.paths.nodeCtlSock) }

func (s *Stack) nodeCtlHealthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.NodeCtlClient().Health(ctx)
	return err == nil
}
