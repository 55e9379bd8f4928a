package agent

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/agentcube/sandboxpool/agent/leasetoken"
	"github.com/agentcube/sandboxpool/agent/shimapi"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Options configure the agent. AddFlags binds every field to a flag; DefaultOptions has the
// defaults.
type Options struct {
	// NodeName is this node (required).
	NodeName string
	// ManifestDir is kubelet's static pod directory.
	ManifestDir string
	// PodNamespace is the namespace of the placeholder pod.
	PodNamespace string
	// PauseImage is the placeholder pod's image.
	PauseImage string
	// NetnsEnabled gives the placeholder pod its own network namespace (alpha).
	NetnsEnabled bool
	// NodeCtlSocket and NodeCtlConfig: node-ctl's socket and the config file the agent writes.
	NodeCtlSocket, NodeCtlConfig string
	// NodeCtlRestartCommand restarts node-ctl when a reload gets no answer;
	// NodeCtlStopCommand stops it when the pool is really gone. Run with sh -c, with
	// NODECTL_PID set when known. Empty disables.
	NodeCtlRestartCommand, NodeCtlStopCommand string
	// NodeCtlPollInterval is how often node-ctl's health and state are read.
	NodeCtlPollInterval time.Duration
	// LeaseNamespace, LeaseRenewInterval and LeaseTTL: the pool's Lease.
	LeaseNamespace     string
	LeaseRenewInterval time.Duration
	LeaseTTL           time.Duration
	// LeaseKubeconfig, when set, is the identity the Leases are written with (all else uses
	// the main one). Under the NodeRestriction admission plugin a node identity may write no
	// Lease but its own in kube-node-lease: give the agent a per-node service account here.
	LeaseKubeconfig string
	leaseConfig     *rest.Config
	// LeaseTokenExpiration is how long each token the agent requests for its Lease identity
	// is valid; it replaces it after 80 % of that (agent/leasetoken). Used when the
	// LeaseKubeconfig authenticates with a tokenFile.
	LeaseTokenExpiration time.Duration
	leaseToken           *leasetoken.Keeper
	// ManifestVerifyInterval re-checks the manifests even without a file system event.
	ManifestVerifyInterval time.Duration
	// Watermark is the share of a smaller memory size usage may reach for a downscale.
	Watermark float64
	// DeferredWarningAfter: a resize deferred this long gets a Warning event.
	DeferredWarningAfter time.Duration
	// ResizePreempt sends a growth to kubelet without first checking that the node has
	// room for it as the scheduler counts it. kubelet then preempts pods that are not
	// critical to make room (a static pod is critical to it). Off: a growth waits for room,
	// and no other pod is evicted for it.
	ResizePreempt bool
	// PieceStartTimeout bounds how long a placeholder pod kubelet has not run may wait: past
	// it the piece is unrunnable (reported, removed when the lock holds without it, asked
	// again after a backoff).
	PieceStartTimeout time.Duration
	// StateFile keeps what the agent must not forget across its restarts: what node-ctl last
	// reported it applies, and the highest piece number written.
	StateFile string
	// ShimAddress is the unix socket the agent serves the placeholder shim on.
	ShimAddress string
	// HealthzAddr serves /healthz and /readyz, MetricsAddr /metrics ("0" disables).
	HealthzAddr, MetricsAddr string
	// Version is reported in status.placeholderAgent.version.
	Version string
	// Clock is the time source (tests inject a fake one).
	Clock clock.Clock
	// NodeCtl, when set, answers instead of a client of NodeCtlSocket (the hollow-node
	// mode simulates node-ctl in process).
	NodeCtl NodeCtl
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		ManifestDir:            "/etc/kubernetes/manifests",
		PodNamespace:           v1alpha1.DefaultPodNamespace,
		PauseImage:             "registry.k8s.io/pause:3.10",
		NodeCtlSocket:          "/run/sandbox-pool/node-ctl.sock",
		NodeCtlConfig:          "/etc/sandbox-pool/node-ctl.json",
		NodeCtlRestartCommand:  "systemctl restart node-ctl.service",
		NodeCtlStopCommand:     "systemctl stop node-ctl.service",
		NodeCtlPollInterval:    5 * time.Second,
		LeaseNamespace:         v1alpha1.DefaultLeaseNamespace,
		LeaseRenewInterval:     10 * time.Second,
		LeaseTTL:               40 * time.Second,
		LeaseTokenExpiration:   leasetoken.DefaultLifetime,
		ManifestVerifyInterval: 30 * time.Second,
		Watermark:              DefaultWatermark,
		DeferredWarningAfter:   10 * time.Minute,
		PieceStartTimeout:      2 * time.Minute,
		StateFile:              DefaultStateFile,
		ShimAddress:            shimapi.DefaultAddress,
		HealthzAddr:            ":8080",
		MetricsAddr:            ":8090",
		Version:                "dev",
		Clock:                  clock.RealClock{},
	}
}

// AddFlags binds the options to flags, with the current values as defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node (required).")
	fs.StringVar(&o.ManifestDir, "manifest-dir", o.ManifestDir, "kubelet's static pod directory (staticPodPath).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of the placeholder pod.")
	fs.StringVar(&o.PauseImage, "pause-image", o.PauseImage, "Image of the placeholder pod (pulled by kubelet with IfNotPresent).")
	fs.BoolVar(&o.NetnsEnabled, "netns-enabled", o.NetnsEnabled, "Alpha: give the placeholder pod its own network namespace instead of the host network.")
	fs.StringVar(&o.NodeCtlSocket, "node-ctl-socket", o.NodeCtlSocket, "node-ctl's unix socket (docs/node-ctl-contract.md).")
	fs.StringVar(&o.NodeCtlConfig, "node-ctl-config", o.NodeCtlConfig, "The node-ctl config file the agent writes.")
	fs.StringVar(&o.NodeCtlRestartCommand, "node-ctl-restart-command", o.NodeCtlRestartCommand, "Restarts node-ctl when a reload gets no answer (sh -c; NODECTL_PID is set when known; empty disables).")
	fs.StringVar(&o.NodeCtlStopCommand, "node-ctl-stop-command", o.NodeCtlStopCommand, "Stops node-ctl when the node's pool is really gone (sh -c; empty disables).")
	fs.DurationVar(&o.NodeCtlPollInterval, "node-ctl-poll-interval", o.NodeCtlPollInterval, "How often node-ctl's health and state are read.")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "Namespace of the pool's Lease (the controller's --lease-namespace).")
	fs.StringVar(&o.LeaseKubeconfig, "lease-kubeconfig", o.LeaseKubeconfig, "Kubeconfig of the identity that renews the pools' Leases (empty: the --kubeconfig one). Needed where the NodeRestriction admission plugin runs: a per-node service account "+v1alpha1.DefaultLeaseNamespace+"/"+v1alpha1.LeaseServiceAccountPrefix+"<node>.")
	fs.DurationVar(&o.LeaseTokenExpiration, "lease-token-expiration", o.LeaseTokenExpiration, "How long each token the agent requests for its Lease identity (a --lease-kubeconfig with tokenFile) is valid, from 10m to 24h; it requests the next, bound to its Node, after 80 % of that and writes it to the tokenFile.")
	fs.DurationVar(&o.LeaseRenewInterval, "lease-renew-interval", o.LeaseRenewInterval, "How often the pool's Lease is renewed.")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", o.LeaseTTL, "The Lease's duration (the controller's --lease-ttl decides liveness).")
	fs.DurationVar(&o.ManifestVerifyInterval, "manifest-verify-interval", o.ManifestVerifyInterval, "Re-check the manifests this often even without a file system event.")
	fs.Float64Var(&o.Watermark, "resize-watermark", o.Watermark, "A memory downscale waits while usage is above this share of the new size.")
	fs.DurationVar(&o.DeferredWarningAfter, "resize-deferred-warning-after", o.DeferredWarningAfter, "Emit a Warning event when a resize has been deferred this long.")
	fs.BoolVar(&o.ResizePreempt, "resize-preempt", o.ResizePreempt, "Send a growth to kubelet without waiting for room on the node: kubelet then preempts pods that are not critical to make room for it. Off: a growth waits until the node has room, and no pod is evicted for it.")
	fs.DurationVar(&o.PieceStartTimeout, "piece-start-timeout", o.PieceStartTimeout, "A placeholder pod kubelet has not run this long after its manifest was written is unrunnable: reported on the pool (Degraded), removed while the lock holds without it, and asked again after a backoff.")
	fs.StringVar(&o.StateFile, "state-file", o.StateFile, "Where the agent keeps, across its restarts, what node-ctl last reported it applies and the highest piece number written (written atomically).")
	fs.StringVar(&o.ShimAddress, "shim-address", o.ShimAddress, "Unix socket the agent serves the placeholder shim on (the shim's "+shimapi.AddressEnv+").")
	fs.StringVar(&o.HealthzAddr, "healthz-addr", o.HealthzAddr, "Address of /healthz and /readyz (\"0\" disables).")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "Address of /metrics (\"0\" disables).")
}

// Validate names every flag whose value cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name is required"))
	}
	for _, s := range []struct{ flag, v string }{
		{"--manifest-dir", o.ManifestDir}, {"--pod-namespace", o.PodNamespace}, {"--pause-image", o.PauseImage},
		{"--node-ctl-socket", o.NodeCtlSocket}, {"--node-ctl-config", o.NodeCtlConfig},
		{"--lease-namespace", o.LeaseNamespace}, {"--shim-address", o.ShimAddress}, {"--state-file", o.StateFile},
	} {
		if s.v == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", s.flag))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--node-ctl-poll-interval", o.NodeCtlPollInterval}, {"--lease-renew-interval", o.LeaseRenewInterval},
		{"--lease-ttl", o.LeaseTTL}, {"--manifest-verify-interval", o.ManifestVerifyInterval},
		{"--resize-deferred-warning-after", o.DeferredWarningAfter}, {"--piece-start-timeout", o.PieceStartTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.flag, d.v))
		}
	}
	if o.LeaseTTL <= o.LeaseRenewInterval {
		errs = append(errs, fmt.Errorf("--lease-ttl (%s) must be longer than --lease-renew-interval (%s)", o.LeaseTTL, o.LeaseRenewInterval))
	}
	if o.Watermark <= 0 || o.Watermark > 1 {
		errs = append(errs, fmt.Errorf("--resize-watermark must be in (0, 1], got %g", o.Watermark))
	}
	return errors.Join(errs...)
}
