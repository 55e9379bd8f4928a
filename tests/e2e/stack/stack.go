// Package stack runs the whole SandboxPool system on one machine as a one-node cluster,
// with its own directories and sockets: etcd and kube-apiserver (envtest, with the Node
// authorizer and the default admission plugins) listening on the node's address on the pod
// network, kube-controller-manager and kube-scheduler; the cluster half applied from
// deploy/ as users apply it (`kubectl apply -k`, the self-signed certificate, the images of
// `make images` imported into the node's containerd), so the controller and the webhook run
// as the Pods of their Deployments; and one node — containerd 2.4.2 with runc (Debian's)
// and the placeholder runtime handler, the node half installed by deploy/node/install.sh
// (the placeholder shim, the reference node-ctl on a real cgroup, the placeholder agent,
// their units played by the stack's supervisor), a real kubelet as system:node:<name>, and
// kube-proxy.
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentcube/sandboxpool/hack/pause/image"
	nodectlapi "github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/shim/manager"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
	"github.com/agentcube/sandboxpool/tests/support"
)

// Timers are the components' timers. Tests shorten the ones of minutes.
type Timers struct {
	NodeCtlPollInterval    time.Duration // agent --node-ctl-poll-interval
	ManifestVerifyInterval time.Duration // agent --manifest-verify-interval
	LeaseRenewInterval     time.Duration // agent --lease-renew-interval
	LeaseTTL               time.Duration // agent and controller --lease-ttl
	DeferredWarningAfter   time.Duration // agent --resize-deferred-warning-after
	PieceStartTimeout      time.Duration // agent --piece-start-timeout
	NodeCtlUnreadyAfter    time.Duration // controller --nodectl-unready-after
	FinalizerTimeout       time.Duration // controller --finalizer-timeout
}

// DefaultTimers are the components' defaults (the controller's as deploy/controller sets
// them), with node-ctl polled every 2 s instead of 5 s so that a demo shows changes
// promptly.
func DefaultTimers() Timers {
	return Timers{
		NodeCtlPollInterval: 2 * time.Second, ManifestVerifyInterval: 30 * time.Second,
		LeaseRenewInterval: 10 * time.Second, LeaseTTL: 40 * time.Second, DeferredWarningAfter: 10 * time.Minute,
		PieceStartTimeout:   2 * time.Minute,
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
	// Tools locate kube-apiserver, etcd, kubectl, kubelet, kube-controller-manager,
	// kube-scheduler, kube-proxy and containerd.
	Tools Tools
	// Bin holds the node's binaries (placeholder-agent, node-ctl,
	// containerd-shim-placeholder-v2) that deploy/node/install.sh installs; empty: built
	// into Dir/bin with `go build`.
	Bin string
	// Images holds the controller's and the webhook's image archives (`make images`'
	// IMAGES_DIR); empty: built into Dir/images.
	Images string
	// Timers of the components.
	Timers Timers
	// NodeRestriction adds the NodeRestriction admission plugin to the API server, as
	// production clusters run it. A node identity may then write no Lease but its own in
	// kube-node-lease; the agent renews its pools' Leases as its per-node service account
	// (--lease-kubeconfig, from hack/agent-lease-credentials.sh), as it always does here.
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
	// LogDir holds one log file per process (the Pods' logs are in PodLog).
	LogDir string
	// The processes: the control plane's controllers, and the node's — containerd, kubelet,
	// node-ctl and the agent under a supervisor that plays their installed systemd units
	// (Restart=always), and kube-proxy under the same supervisor (it exits when its Node is
	// deleted, for its DaemonSet or unit to start it again).
	ControllerManager, Scheduler *Proc
	Containerd, Kubelet          *Proc
	NodeCtl, Agent, KubeProxy    *Unit
	// CgroupRoot is kubelet's cgroupRoot, "/" as on a production node, so that its pod root
	// (PodRoot, /kubepods) is a child of the root cgroup weighted by the node's allocatable
	// cpu and limited to its allocatable memory; NodeCtlCgroup, node-ctl's slice, is a child
	// of PodRoot (docs/node-ctl-contract.md, "Delivery"). No cgroup wraps them: what the
	// slice gets beside the pods is what it would get on a real node.
	CgroupRoot, PodRoot, NodeCtlCgroup string
	// Network is the node's CNI network.
	Network network

	id     string
	paths  nodePaths
	bin    string
	pki    string            // the API server's certificates (writeAPIServerPKI)
	images map[string]string // the cluster half's image references, by image name
	kube   *kubernetes.Clientset

	// envtestDirs are the control plane's temporary directories (for the state file).
	envtestDirs []string
	// ready is set once Start has succeeded.
	ready bool
	// proxyRules is set once kube-proxy may have written iptables rules.
	proxyRules bool
	// imagesToImport holds the cluster half's image archives, imported on each boot.
	imagesToImport string

	link         *link  // the node's path to the API server
	agentHealthz string // the agent's /healthz and /readyz address
	proxyHealthz string // kube-proxy's /healthz address
	// kubeletReadOnly is kubelet's read-only port on loopback (host:port).
	kubeletReadOnly     string
	kubeletReadOnlyPort int

	supervise   context.CancelFunc // stops the units' supervisors
	supervisors sync.WaitGroup
	stopOnce    sync.Once
}

// Start starts everything and waits until the node is Ready and the cluster half runs. On
// error, whatever started is stopped again.
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
		CgroupRoot: "/", PodRoot: podRoot, NodeCtlCgroup: podRoot + "/sandbox-pool", Network: networkFor(id),
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
	for _, d := range []string{s.LogDir, s.paths.manifests, s.paths.kubeletRoot, s.paths.podLogs, filepath.Dir(s.paths.nodeCtlPid)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := EnsureHostPackages(ctx, s.Opts.Logf); err != nil {
		return err
	}
	if err := s.build(ctx); err != nil {
		return err
	}
	imagesDir, err := s.imagesDir(ctx)
	if err != nil {
		return err
	}
	if s.images, err = ImageRefs(imagesDir); err != nil {
		return err
	}
	if err := createBridge(s.Network); err != nil {
		return err
	}
	if err := s.startControlPlane(ctx); err != nil {
		return err
	}
	if s.Admin, err = s.CP.AddUser("sandboxpool-admin", "system:masters"); err != nil {
		return err
	}
	if s.Kubeconfig, err = s.writeKubeconfig("kubeconfig", "sandboxpool-admin", "system:masters"); err != nil {
		return err
	}
	if s.kube, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return err
	}
	if err := s.startControllers(ctx); err != nil {
		return err
	}
	if err := s.installCluster(ctx); err != nil {
		return err
	}
	if err := s.startNode(ctx, imagesDir); err != nil {
		return err
	}
	return s.WaitCluster(ctx, 3*time.Minute)
}

// build builds the node's binaries (unless Options.Bin has them), the pause image and the
// load image (the co-located pods of the delivery tests).
func (s *Stack) build(ctx context.Context) error {
	s.bin = s.Opts.Bin
	if s.bin == "" {
		root, err := corpus.RepoRoot()
		if err != nil {
			return err
		}
		s.bin = filepath.Join(s.Opts.Dir, "bin")
		s.Opts.Logf("building the node's binaries into %s", s.bin)
		if err := (support.GoBuild{Dir: root, Out: s.bin, Static: true}).Run(ctx, NodeBinaries...); err != nil {
			return fmt.Errorf("building the binaries: %w", err)
		}
	}
	for _, pkg := range NodeBinaries {
		if _, err := os.Stat(filepath.Join(s.bin, filepath.Base(pkg))); err != nil {
			return fmt.Errorf("%s missing in %s: %w", filepath.Base(pkg), s.bin, err)
		}
	}
	if err := image.Build(ctx, s.paths.pauseArchive); err != nil {
		return err
	}
	return image.BuildLoad(ctx, s.paths.loadArchive)
}

// podRoot is kubelet's pod root with cgroupRoot "/" and the cgroupfs driver: the machine's
// one, which is why one stack runs on a machine at a time (LockMachine).
const podRoot = "/" + nodectlapi.PodRootCgroupfs

// NodeBinaries are the main packages of the node half, which deploy/node/install.sh
// installs.
var NodeBinaries = []string{"./cmd/placeholder-agent", "./cmd/node-ctl", "./cmd/containerd-shim-placeholder-v2"}

// startNode prepares the node (cgroup, CNI, configurations, the node's identity through
// the link, the node half installed) and boots it.
func (s *Stack) startNode(ctx context.Context, imagesDir string) error {
	o, p := s.Opts, s.paths
	if err := writeCNIConfig(p, s.Network); err != nil {
		return err
	}
	if err := writeContainerdConfig(p); err != nil {
		return err
	}
	var err error
	if s.kubeletReadOnly, err = support.PickFreeAddr(); err != nil {
		return err
	}
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
	proxyKC, err := s.writeKubeconfig("kube-proxy.kubeconfig", proxyUser)
	if err != nil {
		return err
	}
	if err := pointAt(proxyKC, "https://"+s.link.addr); err != nil {
		return err
	}
	if s.proxyHealthz, err = support.PickFreeAddr(); err != nil {
		return err
	}
	if err := s.writeKubeProxyConfig(proxyKC, s.proxyHealthz); err != nil {
		return err
	}
	if s.agentHealthz, err = support.PickFreeAddr(); err != nil {
		return err
	}
	if err := s.installNode(ctx, kc); err != nil {
		return err
	}

	s.Containerd = newProc("containerd", s.LogDir, filepath.Join(o.Tools.Containerd, "containerd"),
		[]string{"--config", filepath.Join(p.containerd, "config.toml")},
		// The installed shim on containerd's PATH, as /usr/local/bin is on a node's.
		"PATH="+p.binDir+":"+o.Tools.Containerd+":"+os.Getenv("PATH"))
	s.NodeCtl = newUnit("node-ctl", s.LogDir, filepath.Join(p.units, "node-ctl.service"))
	s.NodeCtl.StoppedFile, s.NodeCtl.PIDFile = p.nodeCtlHold, p.nodeCtlPid
	s.Agent = newUnit("agent", s.LogDir, filepath.Join(p.units, "placeholder-agent.service"),
		"PATH="+filepath.Dir(p.systemctl)+":"+os.Getenv("PATH"))
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
	s.KubeProxy = fixedUnit(newProc("kube-proxy", s.LogDir, s.kubeProxyBin(), []string{"--config=" + p.kubeProxyCfg, "--v=1"}), time.Second)

	// The units start stopped; BootNode starts them.
	for _, u := range []*Unit{s.NodeCtl, s.Agent, s.KubeProxy} {
		if err := u.SetStopped(true); err != nil {
			return err
		}
	}
	supCtx, cancel := context.WithCancel(context.Background())
	s.supervise = cancel
	for _, u := range []*Unit{s.NodeCtl, s.Agent, s.KubeProxy} {
		s.supervisors.Go(func() {
			u.supervise(supCtx, o.Logf)
		})
	}
	s.imagesToImport = imagesDir
	return s.BootNode(ctx, true)
}

// BootNode starts the node's processes in the order a booting node's services start —
// containerd (the pause image and the cluster half's images imported), node-ctl, the agent,
// kubelet, kube-proxy — and, with waitReady, waits until the agent is ready, the node Ready,
// kube-proxy has written its rules and, once the cluster half is installed, its Pods run
// again on this, the only node (none of it happens while the API server is unreachable).
func (s *Stack) BootNode(ctx context.Context, waitReady bool) error {
	o, p := s.Opts, s.paths
	o.Logf("starting containerd %s with the placeholder runtime handler", s.Containerd.Bin())
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
	for _, archive := range []string{p.pauseArchive, p.loadArchive} {
		if out, err := s.Ctr(ctx, "-n", containerdtest.CRINamespace, "images", "import", archive); err != nil {
			return fmt.Errorf("importing %s: %w: %s", filepath.Base(archive), err, out)
		}
	}
	if _, err := s.ImportImages(ctx, s.imagesToImport); err != nil {
		return err
	}

	o.Logf("starting node-ctl on cgroup %s (its installed unit)", s.NodeCtlCgroup)
	if err := s.NodeCtl.StartUnit(); err != nil {
		return err
	}
	if err := waitFor(ctx, nil, 30*time.Second, func() bool { return s.nodeCtlHealthy(ctx) }); err != nil {
		return fmt.Errorf("node-ctl not healthy: %w; its log ends:\n%s", err, s.NodeCtl.Tail(20))
	}

	o.Logf("starting the placeholder agent as system:node:%s (its installed unit)", o.NodeName)
	if err := s.Agent.StartUnit(); err != nil {
		return err
	}
	if waitReady {
		if err := waitHTTP(ctx, nil, "http://"+s.agentHealthz+"/readyz", time.Minute); err != nil {
			return fmt.Errorf("%w; the agent's log ends:\n%s", err, s.Agent.Tail(20))
		}
	}

	o.Logf("starting kubelet as system:node:%s (staticPodPath %s) and kube-proxy", o.NodeName, p.manifests)
	if err := s.Kubelet.Start(); err != nil {
		return err
	}
	s.proxyRules = true
	if err := s.KubeProxy.StartUnit(); err != nil {
		return err
	}
	if !waitReady {
		return nil
	}
	t0 := time.Now()
	if err := waitFor(ctx, s.Kubelet, 3*time.Minute, func() bool { return s.NodeReady(ctx) }); err != nil {
		return fmt.Errorf("node %s not Ready: %w", o.NodeName, err)
	}
	if err := waitHTTP(ctx, nil, "http://"+s.proxyHealthz+"/healthz", time.Minute); err != nil {
		return err
	}
	o.Logf("node %s Ready in %s", o.NodeName, time.Since(t0).Round(time.Millisecond))
	if s.ready {
		return s.WaitCluster(ctx, 3*time.Minute)
	}
	return nil
}

// ShutdownNode stops the node's processes as a shutdown does, in the reverse order, and
// leaves what a reboot leaves: no pods in containerd (removed through CRI, which stops
// ordinary pods' processes — the controller's and the webhook's — and lets the placeholder
// shims exit), the files on disk (the manifests, node-ctl's config), node-ctl's cgroup and
// its limits. kube-proxy's iptables rules stay until Stop (a reboot would clear them; the
// API server shares this host's rules).
func (s *Stack) ShutdownNode(ctx context.Context) error {
	var errs []error
	for _, u := range []*Unit{s.Agent, s.KubeProxy} {
		if u != nil {
			errs = append(errs, u.StopUnit(30*time.Second))
		}
	}
	if s.Kubelet != nil {
		errs = append(errs, s.Kubelet.Stop(30*time.Second))
	}
	if s.Containerd != nil && s.Containerd.Running() {
		// A sandbox whose container containerd is still tearing down (a killed shim's, say)
		// cannot be removed yet: ask again for a few seconds.
		var out string
		var rmErr error
		_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			out, rmErr = s.Crictl(ctx, "rmp", "--all", "--force")
			return rmErr == nil, nil
		})
		if rmErr != nil {
			errs = append(errs, fmt.Errorf("crictl rmp: %w: %s", rmErr, out))
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

// RestartAgent stops the agent's unit and starts it again with its flags plus extra (a
// later flag wins), written into its environment file as an operator changes them, then
// waits until the agent is ready.
func (s *Stack) RestartAgent(ctx context.Context, extra ...string) error {
	if err := s.Agent.StopUnit(30 * time.Second); err != nil {
		return err
	}
	if err := s.setAgentArgs(extra...); err != nil {
		return err
	}
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

// PlaceholderShims are the placeholder shims this stack's containerd runs: each one's PID
// and the ID of the task it was started for (a pod sandbox's ID). Other test packages run a
// containerd with the same shim at the same time: only the shims whose bundle is below this
// stack's containerd state count.
func (s *Stack) PlaceholderShims() map[int]string {
	out := map[int]string{}
	for pid, sh := range containerdtest.ShimsBelow(s.paths.containerd) {
		if sh.Binary == manager.BinaryName {
			out[pid] = filepath.Base(sh.Bundle)
		}
	}
	return out
}

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
// created outside its directory (cgroups, the CNI bridge, kube-proxy's iptables rules). It
// keeps Dir (logs).
func (s *Stack) Stop() error {
	var errs []error
	s.stopOnce.Do(func() {
		errs = append(errs, s.ShutdownNode(context.Background()))
		if s.supervise != nil {
			s.supervise()
			s.supervisors.Wait()
		}
		for _, p := range []*Proc{s.Scheduler, s.ControllerManager} {
			if p != nil {
				errs = append(errs, p.Stop(15*time.Second))
			}
		}
		if s.proxyRules {
			errs = append(errs, cleanupKubeProxy(s.kubeProxyBin()))
		}
		if s.link != nil {
			s.link.Cut()
		}
		if s.CP != nil {
			errs = append(errs, s.CP.Stop())
		}
		unmountAll(s.Opts.Dir)
		errs = append(errs, removeCgroup(s.PodRoot))
		deleteLink(s.Network.Bridge)
	})
	return errors.Join(errs...)
}

// pollInterval is how often the stack's waits check their condition.
const pollInterval = 100 * time.Millisecond

// waitFor polls cond until it holds, failing when p exits first or timeout passes.
func waitFor(ctx context.Context, p *Proc, timeout time.Duration, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(context.Context) (bool, error) {
		if cond() {
			return true, nil
		}
		if p != nil && !p.Running() {
			return false, fmt.Errorf("%s exited; its log ends:\n%s", p.Name, p.Tail(30))
		}
		return false, nil
	})
	switch {
	case err == nil:
		return nil
	case wait.Interrupted(err) && ctx.Err() == nil && p != nil:
		return fmt.Errorf("not within %s; the log of %s ends:\n%s", timeout, p.Name, p.Tail(30))
	case wait.Interrupted(err) && ctx.Err() == nil:
		return fmt.Errorf("not within %s", timeout)
	case wait.Interrupted(err):
		return ctx.Err()
	}
	return err
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
