package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema"
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

	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"

	// certPollInterval is how often Run looks for a missing certificate at start; once
	// loaded, changes are picked up by file events (and certwatcher's own 10 s poll).
	certPollInterval = time.Second
	// shutdownGrace is how long in-flight requests get to finish on shutdown.
	shutdownGrace = 10 * time.Second
	// DefaultShutdownDelay is how long the webhook keeps serving after it is told to stop
	// (SIGTERM): the time the cluster takes to stop sending it requests (docs/webhook.md,
	// "Shutdown").
	DefaultShutdownDelay = 5 * time.Second
	// readHeaderTimeout bounds a client that opens a connection and sends nothing.
	readHeaderTimeout = 10 * time.Second
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
	// NodeSANamespace and NodeSAPrefix name the per-node agent service accounts
	// (system:serviceaccount:<NodeSANamespace>:<NodeSAPrefix><node>); both empty trusts
	// only the node identity system:node:<node>.
	NodeSANamespace string
	NodeSAPrefix    string
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
		NodeSANamespace:     c.NodeServiceAccountNamespace,
		NodeSAPrefix:        c.NodeServiceAccountPrefix,
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
		ControllerUsernames:         o.ControllerUsernames,
		ControllerGroups:            o.ControllerGroups,
		NodeServiceAccountNamespace: o.NodeSANamespace,
		NodeServiceAccountPrefix:    o.NodeSAPrefix,
	}
}

// NewEngine loads the policy of o (its bundle, or the embedded one) with o's identities.
func NewEngine(ctx context.Context, o Options) (*policy.Engine, error) {
	opts := []policy.Option{policy.WithConfig(o.policyConfig())}
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

// Run serves the webhook until ctx is done, drains for ShutdownDelay, then shuts its servers
// down gracefully:
//   - the admission Handler at ValidatePath over HTTPS on Addr (TLS 1.2 or later), with the
//     certificate of CertDir reloaded whenever its files change;
//   - /healthz (the process is up) and /readyz (the certificate is loaded and the pool
//     inventory has synced) on HealthAddr;
//   - /metrics on MetricsAddr: controller-runtime's registry, with the webhook's metrics,
//     certwatcher's, client-go's and the Go runtime and process collectors.
//
// The drain is what keeps a rolling update or a deleted Pod from failing admissions (with
// failurePolicy Fail, an admission the API server cannot get an answer for is an error for
// the writer): when a webhook Pod is deleted, the API server's connections to it stay open
// and new ones can reach it until the Pod's endpoint is gone from every node's Service
// rules. So the webhook keeps answering meanwhile, with "Connection: close" on each answer
// so that each connection's next request goes through the updated rules to another replica,
// and reports not ready; only then does it stop listening.
//
// cfg reaches the API server for the cluster-wide SandboxPool informer that feeds the
// policy's inventory. Run returns the first error of any server; nil after ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	opts = opts.withDefaults()
	if opts.ShutdownDelay < 0 {
		return fmt.Errorf("shutdown delay %s: must not be negative", opts.ShutdownDelay)
	}
	s, err := schema.Compiled()
	if err != nil {
		return fmt.Errorf("compiling the schema: %w", err)
	}
	engine, err := NewEngine(ctx, opts)
	if err != nil {
		return err
	}
	handler, err := NewHandler(NewValidator(s, engine), ctrlmetrics.Registry, log.WithName("admission"))
	if err != nil {
		return err
	}
	if err := registerRuntimeMetrics(ctrlmetrics.Registry); err != nil {
		return err
	}
	inv := NewInventory(engine, log.WithName("inventory"))
	pools, err := newPoolCache(ctx, cfg, inv)
	if err != nil {
		return err
	}
	certs := &certificates{dir: opts.CertDir}

	webhookLn, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("listening for admission reviews: %w", err)
	}
	healthLn, err := net.Listen("tcp", opts.HealthAddr)
	if err != nil {
		webhookLn.Close()
		return fmt.Errorf("listening for health checks: %w", err)
	}
	metricsLn, err := net.Listen("tcp", opts.MetricsAddr)
	if err != nil {
		webhookLn.Close()
		healthLn.Close()
		return fmt.Errorf("listening for metrics: %w", err)
	}

	log.Info("starting", "addr", opts.Addr, "certDir", opts.CertDir, "healthAddr", opts.HealthAddr,
		"metricsAddr", opts.MetricsAddr, "policyBundle", cmp.Or(opts.PolicyBundle, "embedded"), "shutdownDelay", opts.ShutdownDelay)
	// The servers and the informer run until the drain after ctx is done has passed.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	var draining atomic.Bool
	g, gctx := errgroup.WithContext(serveCtx)
	stop := ctx.Done()
	g.Go(func() error {
		select {
		case <-gctx.Done(): // a server failed
			return nil
		case <-stop:
		}
		draining.Store(true)
		log.Info("stopping: answering with Connection: close and not ready until the delay has passed", "shutdownDelay", opts.ShutdownDelay)
		t := time.NewTimer(opts.ShutdownDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-gctx.Done():
		}
		stopServing()
		return nil
	})
	ctx = gctx
	g.Go(func() error {
		return serve(ctx, newServer(healthMux(certs.loaded, inv.HasSynced, draining.Load), log), healthLn)
	})
	g.Go(func() error {
		mux := http.NewServeMux()
		mux.Handle(MetricsPath, promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
		return serve(ctx, newServer(mux, log), metricsLn)
	})
	g.Go(func() error {
		if err := pools.Start(ctx); err != nil {
			return fmt.Errorf("running the SandboxPool informer: %w", err)
		}
		return nil
	})
	g.Go(func() error { return serveWebhook(ctx, webhookLn, certs, closeWhile(&draining, handler), log) })
	err = g.Wait()
	log.Info("stopped", "error", errString(err))
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// registerRuntimeMetrics adds the Go runtime and process collectors (a manager would;
// the webhook runs without one).
func registerRuntimeMetrics(reg prometheus.Registerer) error {
	if _, err := register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	_, err := register(reg, collectors.NewGoCollector())
	return err
}

// newPoolCache is a cache with one cluster-wide SandboxPool informer, inv registered on
// it. The cache keeps only what the inventory reads (no status, no managed fields).
func newPoolCache(ctx context.Context, cfg *rest.Config, inv *Inventory) (cache.Cache, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultTransform: trimPool})
	if err != nil {
		return nil, fmt.Errorf("creating the SandboxPool cache: %w", err)
	}
	informer, err := c.GetInformer(ctx, &v1alpha1.SandboxPool{})
	if err != nil {
		return nil, fmt.Errorf("creating the SandboxPool informer: %w", err)
	}
	if err := inv.Register(informer); err != nil {
		return nil, fmt.Errorf("registering the pool inventory: %w", err)
	}
	return c, nil
}

var _ PoolInformer = cache.Informer(nil)

// trimPool drops the parts of a pool the inventory does not read before it is cached.
func trimPool(obj any) (any, error) {
	if p, ok := obj.(*v1alpha1.SandboxPool); ok {
		p.ManagedFields = nil
		p.Annotations = nil
		p.Status = v1alpha1.SandboxPoolStatus{}
	}
	return obj, nil
}

// certificates is the webhook's serving certificate, loaded from dir and reloaded by a
// certwatcher whenever tls.crt or tls.key changes.
type certificates struct {
	dir     string
	watcher atomic.Pointer[certwatcher.CertWatcher] // nil until the first load
}

// load waits until the certificate in dir can be read (a Secret may be mounted late),
// then returns its watcher; Start the watcher to reload on change.
func (c *certificates) load(ctx context.Context, log logr.Logger) (*certwatcher.CertWatcher, error) {
	certPath, keyPath := filepath.Join(c.dir, CertFile), filepath.Join(c.dir, KeyFile)
	var w *certwatcher.CertWatcher
	attempts := 0
	err := wait.PollUntilContextCancel(ctx, certPollInterval, true, func(context.Context) (bool, error) {
		var err error
		if w, err = certwatcher.New(certPath, keyPath); err != nil {
			// Say it once at the default level, then only at V(1) every poll.
			log.V(min(attempts, 1)).Info("waiting for the serving certificate", "cert", certPath, "key", keyPath, "error", err.Error())
			attempts++
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate from %s: %w", c.dir, err)
	}
	c.watcher.Store(w)
	return w, nil
}

// loaded reports whether a certificate has been loaded.
func (c *certificates) loaded() bool { return c.watcher.Load() != nil }

// serveWebhook serves h at ValidatePath over TLS on ln with the certificate of certs,
// reloaded on change, until ctx is done.
func serveWebhook(ctx context.Context, ln net.Listener, certs *certificates, h http.Handler, log logr.Logger) error {
	w, err := certs.load(ctx, log)
	if err != nil {
		ln.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := w.Start(ctx); err != nil {
			return fmt.Errorf("watching the serving certificate: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		mux := http.NewServeMux()
		mux.Handle(ValidatePath, h)
		srv := newServer(mux, log)
		// No NextProtos: HTTP/1.1 only, as controller-runtime webhooks default to since
		// the HTTP/2 rapid-reset attacks (CVE-2023-44487).
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}
		return serve(ctx, srv, tls.NewListener(ln, srv.TLSConfig))
	})
	return g.Wait()
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

// healthMux serves /healthz (always ok while the process serves) and /readyz (ok once
// the certificate is loaded and the inventory synced, until the webhook is stopping).
func healthMux(certLoaded, inventorySynced, stopping func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		var missing []string
		if !certLoaded() {
			missing = append(missing, "serving certificate not loaded")
		}
		if !inventorySynced() {
			missing = append(missing, "pool inventory not synced")
		}
		if stopping() {
			missing = append(missing, "shutting down")
		}
		if len(missing) > 0 {
			http.Error(w, strings.Join(missing, "; "), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func newServer(h http.Handler, log logr.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          stdlog.New(logWriter{log.WithName("http")}, "", 0),
	}
}

// serve runs srv on ln until ctx is done, then shuts it down, letting in-flight requests
// finish for up to shutdownGrace.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the server on %s: %w", ln.Addr(), err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	return nil
}

// logWriter sends net/http's error log (TLS handshake failures and the like) to logr.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
