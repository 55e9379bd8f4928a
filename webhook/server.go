package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Defaults of Options, and the files and paths the servers use.
const (
	DefaultAddr        = ":9443"
	DefaultMetricsAddr = ":8080"
	DefaultHealthAddr  = ":8081"
	// DefaultCertDir is where the Deployment mounts the serving certificate's Secret.
	DefaultCertDir = "/tmp/k8s-webhook-server/serving-certs"

	// CertFile and KeyFile are the names of the certificate and key in the cert dir, as in
	// a kubernetes.io/tls Secret.
	CertFile = "tls.crt"
	KeyFile  = "tls.key"

	// DefaultShutdownDelay is how long the webhook keeps serving after it is told to stop
	// (SIGTERM): the time the cluster takes to stop sending it requests (docs/webhook.md,
	// "Shutdown").
	DefaultShutdownDelay = 5 * time.Second

	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"
)

// Options configure Run. DefaultOptions is the default install; empty addresses and cert
// dir fall back to the defaults above.
type Options struct {
	// Addr is the webhook's HTTPS listen address.
	Addr string
	// CertDir holds tls.crt and tls.key; they are reloaded when they change.
	CertDir string
	// MetricsAddr serves /metrics (plain HTTP).
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz (plain HTTP).
	HealthAddr string
	// ControllerUsernames and ControllerGroups identify the SandboxPool controller to the
	// status-scoping rule; at least one must be set.
	ControllerUsernames []string
	ControllerGroups    []string
	// OperatorUsernames and OperatorGroups are the holders of the sandbox-pool-operator
	// role: the policy lets them change a pool's spec.override and nothing else of it.
	OperatorUsernames []string
	OperatorGroups    []string
	// PolicyBundle is an OPA bundle (a directory or a .tar.gz) to evaluate instead of the
	// embedded one; empty uses the embedded bundle.
	PolicyBundle string
	// ShutdownDelay is how long Run keeps serving once ctx is done, before it shuts its
	// servers down: /readyz fails and every answer closes its connection meanwhile.
	ShutdownDelay time.Duration
}

// DefaultOptions are the options of the default install.
func DefaultOptions() Options {
	c := policy.DefaultConfig()
	return Options{
		Addr:                DefaultAddr,
		CertDir:             DefaultCertDir,
		MetricsAddr:         DefaultMetricsAddr,
		HealthAddr:          DefaultHealthAddr,
		ControllerUsernames: c.ControllerUsernames,
		ControllerGroups:    c.ControllerGroups,
		OperatorUsernames:   c.OperatorUsernames,
		OperatorGroups:      c.OperatorGroups,
		ShutdownDelay:       DefaultShutdownDelay,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	o.Addr = cmp.Or(o.Addr, d.Addr)
	o.CertDir = cmp.Or(o.CertDir, d.CertDir)
	o.MetricsAddr = cmp.Or(o.MetricsAddr, d.MetricsAddr)
	o.HealthAddr = cmp.Or(o.HealthAddr, d.HealthAddr)
	return o
}

// policyConfig is the policy's data.config of o.
func (o Options) policyConfig() policy.Config {
	return policy.Config{
		ControllerUsernames: o.ControllerUsernames,
		ControllerGroups:    o.ControllerGroups,
		OperatorUsernames:   o.OperatorUsernames,
		OperatorGroups:      o.OperatorGroups,
	}
}

// NewEngine loads the policy of o (its bundle, or the embedded one) with o's identities,
// checking RuntimeClasses against an inventory that starts empty and not synced.
func NewEngine(ctx context.Context, o Options) (*policy.Engine, error) {
	opts := []policy.Option{policy.WithConfig(o.policyConfig()), policy.WithRuntimeClasses()}
	if o.PolicyBundle != "" {
		b, err := policy.LoadBundle(o.PolicyBundle)
		if err != nil {
			return nil, err
		}
		opts = append(opts, policy.WithBundle(b))
	}
	e, err := policy.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the admission policy: %w", err)
	}
	return e, nil
}

// Run serves the webhook until ctx is done, drains for ShutdownDelay, then shuts it down
// gracefully. It runs the manager of newManager; it returns the first error of any of its
// servers, nil after ctx is done.
//
// The drain is what keeps a rolling update or a deleted Pod from failing admissions (with
// failurePolicy Fail, an admission the API server cannot get an answer for is an error for
// the writer): when a webhook Pod is deleted, the API server's connections to it stay open
// and new ones can reach it until the Pod's endpoint is gone from every node's Service
// rules. So the webhook keeps answering meanwhile, with "Connection: close" on each answer
// so that each connection's next request goes through the updated rules to another replica,
// and reports not ready; only then does it stop listening.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	opts = opts.withDefaults()
	if opts.ShutdownDelay < 0 {
		return fmt.Errorf("--shutdown-delay %s: must not be negative", opts.ShutdownDelay)
	}
	var draining atomic.Bool
	mgr, err := newManager(ctx, cfg, opts, &draining, log)
	if err != nil {
		return err
	}
	log.Info("starting", "addr", opts.Addr, "certDir", opts.CertDir, "healthAddr", opts.HealthAddr,
		"metricsAddr", opts.MetricsAddr, "policyBundle", cmp.Or(opts.PolicyBundle, "embedded"), "shutdownDelay", opts.ShutdownDelay)
	// The manager runs until the drain after ctx is done has passed.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		select {
		case <-serveCtx.Done(): // the manager failed
			return
		case <-ctx.Done():
		}
		draining.Store(true)
		log.Info("stopping: answering with Connection: close and not ready until the delay has passed", "shutdownDelay", opts.ShutdownDelay)
		t := time.NewTimer(opts.ShutdownDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-serveCtx.Done():
		}
		stopServing()
	}()
	err = mgr.Start(serveCtx)
	log.Info("stopped", "error", errString(err))
	return err
}

// newManager builds the webhook's process as a controller-runtime manager:
//   - its webhook server serves the admission Handler at ValidatePath over HTTPS on Addr
//     (TLS 1.2 or later, HTTP/1.1), with the certificate of CertDir, which must exist at
//     start and is reloaded whenever its files change (controller-runtime's certwatcher);
//   - /healthz (the process is up) and /readyz (the webhook server answers TLS and the pool
//     inventory has synced, until draining is set) on HealthAddr;
//   - while draining is set, every answer asks the client to close its connection;
//   - /metrics on MetricsAddr: controller-runtime's registry, with the webhook's metrics,
//     the webhook server's, certwatcher's, client-go's and the Go runtime and process
//     collectors;
//   - its cache holds the cluster-wide SandboxPool informer that feeds the policy's
//     inventory, and the RuntimeClass informer that feeds its RuntimeClasses, reached
//     through cfg; /readyz also waits for both.
func newManager(ctx context.Context, cfg *rest.Config, opts Options, draining *atomic.Bool, log logr.Logger) (manager.Manager, error) {
	opts = opts.withDefaults()
	host, port, err := splitAddr(opts.Addr)
	if err != nil {
		return nil, err
	}
	engine, err := NewEngine(ctx, opts)
	if err != nil {
		return nil, err
	}
	handler, err := NewHandler(NewValidator(engine), ctrlmetrics.Registry, log.WithName("admission"))
	if err != nil {
		return nil, err
	}
	if err := registerRuntimeMetrics(ctrlmetrics.Registry); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, nodev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: scheme,
		Logger: log,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: host, Port: port, CertDir: opts.CertDir, CertName: CertFile, KeyName: KeyFile,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) {
				c.MinVersion = tls.VersionTLS12
				// HTTP/1.1 only: HTTP/2 is off in controller-runtime webhooks since the rapid-reset
				// attacks (CVE-2023-44487), but the server offers it unless told otherwise.
				c.NextProtos = []string{"http/1.1"}
			}},
		}),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.HealthAddr,
		LivenessEndpointName:   HealthzPath,
		ReadinessEndpointName:  ReadyzPath,
		Cache:                  cache.Options{DefaultTransform: trimCached},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	server := mgr.GetWebhookServer() // adds the server to the manager's runnables
	server.Register(ValidatePath, closeWhile(draining, handler))

	inv := NewInventory(engine, log.WithName("inventory"))
	informer, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.SandboxPool{})
	if err != nil {
		return nil, fmt.Errorf("creating the SandboxPool informer: %w", err)
	}
	if err := inv.Register(informer); err != nil {
		return nil, fmt.Errorf("registering the pool inventory: %w", err)
	}
	rcs := NewRuntimeClasses(engine, log.WithName("runtimeclasses"))
	rcInformer, err := mgr.GetCache().GetInformer(ctx, &nodev1.RuntimeClass{})
	if err != nil {
		return nil, fmt.Errorf("creating the RuntimeClass informer: %w", err)
	}
	if err := rcs.Register(rcInformer); err != nil {
		return nil, fmt.Errorf("registering the RuntimeClass inventory: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(rcs.Run)); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return nil, err
	}
	// Until the inventory has every pool, a CREATE could miss a conflicting one.
	if err := mgr.AddReadyzCheck("inventory", func(*http.Request) error {
		if !inv.HasSynced() {
			return errors.New("pool inventory not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Until then every class or pool that names a RuntimeClass would be refused.
	if err := mgr.AddReadyzCheck("runtimeclasses", func(*http.Request) error {
		if !rcs.HasSynced() {
			return errors.New("RuntimeClasses not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("shutting-down", func(*http.Request) error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// closeWhile answers through h, asking the client to close the connection after the answer
// while draining is set.
func closeWhile(draining *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// splitAddr splits the --addr of the webhook server into its host and port.
func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--addr %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("--addr %q: the port must be a number from 1 to 65535", addr)
	}
	return host, port, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// registerRuntimeMetrics adds the Go runtime and process collectors, with the options
// controller-runtime's controller package registers them with: the webhook runs no
// controller, and in a process that does, the registration is the same collector again,
// not a clash of descriptors.
func registerRuntimeMetrics(reg prometheus.Registerer) error {
	if _, err := register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	_, err := register(reg, collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)))
	return err
}

var _ PoolInformer = cache.Informer(nil)

// trimCached drops the parts of a pool or RuntimeClass the inventories do not read before
// it is cached.
func trimCached(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1alpha1.SandboxPool:
		o.ManagedFields = nil
		o.Annotations = nil
		o.Status = v1alpha1.SandboxPoolStatus{}
	case *nodev1.RuntimeClass:
		o.ManagedFields = nil
		o.Annotations = nil
		o.Overhead, o.Scheduling = nil, nil
	}
	return obj, nil
}
