package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/agentcube/sandboxpool/operator/phase"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Options configure the controller. Every field has a flag (AddFlags) and a default
// (DefaultOptions); the zero value of a duration means its default.
type Options struct {
	// LeaseNamespace holds the agents' Leases, one per pool, named after the pool.
	LeaseNamespace string
	// PodNamespace holds the placeholder pods' mirror pods (the agents' --pod-namespace):
	// the only pods the controller reads.
	PodNamespace string
	// LeaseTTL: a Lease not renewed for this long makes PlaceholderAgentHealthy False.
	LeaseTTL time.Duration
	// NodeCtlUnreadyAfter: node-ctl down this long turns Degraded into Unready.
	NodeCtlUnreadyAfter time.Duration
	// FinalizerTimeout: a deleted pool whose mirror pod stays this long is released anyway.
	FinalizerTimeout time.Duration
	// NodeGoneGrace: the pool of a node gone this long (and whose agent's Lease is not
	// renewed) is deleted, with its Lease.
	NodeGoneGrace time.Duration
	// MaxConcurrentReconciles per controller.
	MaxConcurrentReconciles int
	// BurstCreates caps the pool creates of one class reconcile.
	BurstCreates int
	// KubeAPIQPS and KubeAPIBurst limit the controller's requests to the API server.
	KubeAPIQPS   float64
	KubeAPIBurst int

	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz ("0" disables).
	MetricsAddr, ProbeAddr string
	// LeaderElection makes replicas safe: only the leader reconciles.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod of the leader election.
	LeaderLeaseDuration, LeaderRenewDeadline, LeaderRetryPeriod time.Duration

	// Clock is the time source of every timer (tests inject a fake one).
	Clock clock.PassiveClock
}

// DefaultLeaderElectionID names the leader-election Lease.
const DefaultLeaderElectionID = "sandboxpool-controller." + v1alpha1.GroupName

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		LeaseNamespace:          v1alpha1.DefaultLeaseNamespace,
		PodNamespace:            v1alpha1.DefaultPodNamespace,
		LeaseTTL:                DefaultLeaseTTL,
		NodeCtlUnreadyAfter:     phase.DefaultNodeCtlUnreadyAfter,
		FinalizerTimeout:        DefaultFinalizerTimeout,
		NodeGoneGrace:           DefaultNodeGoneGrace,
		MaxConcurrentReconciles: 4,
		BurstCreates:            DefaultBurstCreates,
		KubeAPIQPS:              50,
		KubeAPIBurst:            100,
		MetricsAddr:             ":8080",
		ProbeAddr:               ":8081",
		LeaderElection:          true,
		LeaderElectionNamespace: v1alpha1.DefaultSystemNamespace,
		LeaderElectionID:        DefaultLeaderElectionID,
		LeaderLeaseDuration:     15 * time.Second,
		LeaderRenewDeadline:     10 * time.Second,
		LeaderRetryPeriod:       2 * time.Second,
		Clock:                   clock.RealClock{},
	}
}

// AddFlags binds the options to flags, with the current values as defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "Namespace of the placeholder agents' Leases (one per pool, named after it).")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of the placeholder pods' mirror pods (the agents' --pod-namespace); the controller reads pods there only.")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", o.LeaseTTL, "A pool whose agent Lease is not renewed for this long gets PlaceholderAgentHealthy=False.")
	fs.DurationVar(&o.NodeCtlUnreadyAfter, "nodectl-unready-after", o.NodeCtlUnreadyAfter, "How long node-ctl may be down (status.nodeCtl.downSince) before a Degraded pool becomes Unready.")
	fs.DurationVar(&o.FinalizerTimeout, "finalizer-timeout", o.FinalizerTimeout, "How long a deleted pool waits for its mirror pod before its finalizer is removed anyway (with a Warning event).")
	fs.DurationVar(&o.NodeGoneGrace, "node-gone-grace", o.NodeGoneGrace, "How long a pool's node must have been gone (NodeNotFound=True), with its agent's Lease not renewed, before the pool and its Lease are deleted. Must be positive.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "Pools (and, separately, classes) reconciled at once.")
	fs.IntVar(&o.BurstCreates, "burst-creates", o.BurstCreates, "Most pools one class reconcile creates (in slow-start batches 1, 2, 4, …); the rest follow.")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second to the API server (client-side limit, for each of the two controllers: the class controller's creates and the pool controller's status writes do not share it).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests to the API server above --kube-api-qps.")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address of /metrics (\"0\" disables).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "Address of /healthz and /readyz (\"0\" disables).")
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "Elect a leader among replicas; only the leader reconciles.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader-election Lease.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader-election Lease.")
	fs.DurationVar(&o.LeaderLeaseDuration, "leader-lease-duration", o.LeaderLeaseDuration, "How long a non-leader waits before taking over an unrenewed leadership.")
	fs.DurationVar(&o.LeaderRenewDeadline, "leader-renew-deadline", o.LeaderRenewDeadline, "How long the leader retries renewing before it gives up leadership.")
	fs.DurationVar(&o.LeaderRetryPeriod, "leader-retry-period", o.LeaderRetryPeriod, "How often leader-election actions are retried.")
}

// Validate names the first flag with a value that cannot work.
func (o *Options) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--lease-ttl", o.LeaseTTL}, {"--nodectl-unready-after", o.NodeCtlUnreadyAfter}, {"--finalizer-timeout", o.FinalizerTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.flag, d.v))
		}
	}
	if o.NodeGoneGrace <= 0 {
		errs = append(errs, fmt.Errorf("--node-gone-grace must be positive, got %s: it is how long a node must have been gone before its pool is deleted (no value turns the deletion off; a long one, e.g. 24h, keeps such pools that long)", o.NodeGoneGrace))
	}
	if o.LeaseNamespace == "" {
		errs = append(errs, errors.New("--lease-namespace must not be empty"))
	}
	if o.PodNamespace == "" {
		errs = append(errs, errors.New("--pod-namespace must not be empty"))
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.BurstCreates < 1 {
		errs = append(errs, fmt.Errorf("--burst-creates must be at least 1, got %d", o.BurstCreates))
	}
	if o.LeaderElection && o.LeaderRenewDeadline >= o.LeaderLeaseDuration {
		errs = append(errs, fmt.Errorf("--leader-renew-deadline (%s) must be shorter than --leader-lease-duration (%s)", o.LeaderRenewDeadline, o.LeaderLeaseDuration))
	}
	return errors.Join(errs...)
}

// Scheme has the types the controller reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewManager builds the controller's manager with both reconcilers, health checks and
// metrics, caching only what the controller reads: Leases of LeaseNamespace, the placeholder
// pods of PodNamespace (those with the pool-name label; its RBAC grants pods there only) and
// node metadata.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
	hasPool, err := labels.NewRequirement(v1alpha1.LabelPoolName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        s,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaderLeaseDuration,
		RenewDeadline:                 &o.LeaderRenewDeadline,
		RetryPeriod:                   &o.LeaderRetryPeriod,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{o.LeaseNamespace: {}}},
			&corev1.Pod{}:           {Namespaces: map[string]cache.Config{o.PodNamespace: {}}, Label: labels.NewSelector().Add(*hasPool)},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := Setup(context.Background(), mgr, o); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Setup registers the cache index and both reconcilers with a manager.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	sch, err := schema.Compiled()
	if err != nil {
		return fmt.Errorf("compiling the CUE schema: %w", err)
	}
	if err := IndexPools(ctx, mgr); err != nil {
		return fmt.Errorf("indexing pools: %w", err)
	}
	rec := mgr.GetEventRecorder(v1alpha1.FieldManagerController)
	if err := (&ClassReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Schema: sch, Recorder: rec, Clock: o.Clock,
		BurstCreates: o.BurstCreates, MaxConcurrentReconciles: o.MaxConcurrentReconciles,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the class controller: %w", err)
	}
	// The pool controller writes with its own client, so its own client-side rate limit:
	// the first status of each new pool must not halve the speed of a fan-out's creates.
	poolClient, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		return fmt.Errorf("creating the pool controller's client: %w", err)
	}
	if err := (&PoolReconciler{
		Client: poolClient, APIReader: mgr.GetAPIReader(), Recorder: rec, Clock: o.Clock, LeaseNamespace: o.LeaseNamespace,
		LeaseTTL: o.LeaseTTL, NodeCtlUnreadyAfter: o.NodeCtlUnreadyAfter, FinalizerTimeout: o.FinalizerTimeout,
		NodeGoneGrace: o.NodeGoneGrace, MaxConcurrentReconciles: o.MaxConcurrentReconciles, PodNamespace: o.PodNamespace,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pool controller: %w", err)
	}
	return nil
}
