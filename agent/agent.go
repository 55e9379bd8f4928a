package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/agentcube/sandboxpool/agent/leasetoken"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Agent is one node's placeholder-agent. Build it with New and run it with Run.
type Agent struct {
	cfg      *rest.Config
	opts     Options
	mgr      manager.Manager
	client   client.Client // pools and pods from the node-scoped cache; Leases uncached
	reader   client.Reader // the API server, uncached
	recorder recorder.EventRecorder
	schema   *schema.Schema
	nodectl  NodeCtl
	// triggers re-run the pool reconcile from outside the informers: node-ctl polls,
	// manifest file events and shim calls. The object's name is the pool's name.
	triggers chan event.GenericEvent

	// syncMu serialises sync passes: the reconciler's and the shim's Create.
	syncMu sync.Mutex

	mu sync.Mutex // guards the fields below
	// nc is the last node-ctl poll.
	nc nodeCtlView
	// shim is what the placeholder shim said of each placeholder pod since this agent
	// started, by the pod's name.
	shim map[string]shimState
	// shimWatch stops the watch of each pod's shim process, by the pod's name.
	shimWatch map[string]func()
	// poolStates is what the agent remembers of each pool of its node between passes.
	poolStates map[string]*poolState
	// stopped records the pool UIDs for which node-ctl has been stopped.
	stopped map[types.UID]bool
	// lastRestart rate-limits the node-ctl restart fallback.
	lastRestart time.Time
	// started is when the agent started: a piece waits PieceStartTimeout from when it was
	// written or from then, whichever is later (at a node's boot kubelet takes a while).
	started time.Time
	// kept is the state kept in Options.StateFile (keep); keptUnwritten: its last write
	// failed.
	kept          nodeState
	keptUnwritten bool
	// sent is the node-ctl config file as the agent last wrote it (read back at start);
	// nil while it holds none. node-ctl may apply it whenever it reloads or restarts.
	sent *api.Config

	// keepMu serialises the writes of the state file.
	keepMu sync.Mutex

	// leaseClient writes the Leases: Options.LeaseKubeconfig's identity, or client's.
	leaseClient client.Client
	// renewMu serialises Lease renewals: the renewal loop and a new pool's first pass
	// would otherwise both create its Lease, and one would fail.
	renewMu sync.Mutex
}

// poolState is what the agent remembers of one pool of its node between passes. It goes
// with the pool (poolGone); a restarted agent starts without it and rebuilds it from what it
// observes.
type poolState struct {
	// reported is the last status applied, for "write only when a field changed".
	reported reportedStatus
	// resize is the pool's resize as the passes saw it: deferral, kubelet's refusals.
	resize resizeNotes
	// lease is the pool's Lease as last written, for renewals without a GET.
	lease *coordinationv1.Lease
	// ran are the static pod UIDs of the pool's pieces this agent has seen run (their mirror
	// pods Ready): a mirror pod kubelet creates again for one of them stands for a running
	// piece while kubelet has written no status to it and the shim says it runs.
	ran map[types.UID]bool
}

// poolStateLocked returns what the agent remembers of pool, made if it has nothing yet.
// a.mu must be held.
func (a *Agent) poolStateLocked(pool string) *poolState {
	st := a.poolStates[pool]
	if st == nil {
		st = &poolState{}
		a.poolStates[pool] = st
	}
	return st
}

// Scheme has the types the agent reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// New checks the options and compiles the schema; Run does the rest.
func New(cfg *rest.Config, o Options) (*Agent, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.LeaseKubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", o.LeaseKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--lease-kubeconfig: %w", err)
		}
		if o.leaseConfig, o.leaseToken, err = leasetoken.New(c, o.NodeName, o.LeaseTokenExpiration, clock.RealClock{}); err != nil {
			return nil, fmt.Errorf("--lease-kubeconfig: %w", err)
		}
	}
	sch, err := schema.Compiled()
	if err != nil {
		return nil, fmt.Errorf("compiling the CUE schema: %w", err)
	}
	return newAgent(cfg, o, sch, make(chan event.GenericEvent, 64)), nil
}

func newAgent(cfg *rest.Config, o Options, sch *schema.Schema, triggers chan event.GenericEvent) *Agent {
	nc := o.NodeCtl
	if nc == nil {
		nc = nodectl.New(o.NodeCtlSocket)
	}
	return &Agent{
		cfg: cfg, opts: o, schema: sch, nodectl: nc, triggers: triggers,
		shim: map[string]shimState{}, shimWatch: map[string]func(){}, poolStates: map[string]*poolState{}, stopped: map[types.UID]bool{},
		started: o.Clock.Now(),
	}
}

// newManager builds a controller-runtime manager whose cache holds only this node's pools
// (field selector spec.nodeName, filtered by the API server) and the pods of its placeholder
// pods' namespace bound to it that carry the pool label, with
// /healthz, /readyz and /metrics. It needs the API server (to map the kinds).
func (a *Agent) newManager(ctx context.Context) error {
	o := a.opts
	s, err := Scheme()
	if err != nil {
		return err
	}
	hasPool, err := labels.NewRequirement(v1alpha1.LabelPoolName, selection.Exists, nil)
	if err != nil {
		return err
	}
	onNode := fields.OneTermEqualSelector("spec.nodeName", o.NodeName)
	mgr, err := ctrl.NewManager(a.cfg, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthzAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.SandboxPool{}: {Field: onNode},
			// Only the placeholder pods' namespace: no pod elsewhere can be a piece (ownMirror).
			&corev1.Pod{}: {Field: onNode, Label: labels.NewSelector().Add(*hasPool), Namespaces: map[string]cache.Config{o.PodNamespace: {}}},
		}},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&coordinationv1.Lease{}}}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := indexByNode(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	a.mgr, a.client, a.reader = mgr, mgr.GetClient(), mgr.GetAPIReader()
	if o.leaseConfig != nil {
		if a.leaseClient, err = client.New(o.leaseConfig, client.Options{Scheme: s}); err != nil {
			return fmt.Errorf("the --lease-kubeconfig client: %w", err)
		}
	}
	a.recorder = mgr.GetEventRecorder(v1alpha1.FieldManagerAgent)
	return a.setup()
}

func (a *Agent) setup() error {
	mgr := a.mgr
	byPoolAnnotation := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		if pool := o.GetAnnotations()[v1alpha1.AnnotationPoolName]; pool != "" {
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
		}
		return nil
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("placeholder-agent").
		For(&v1alpha1.SandboxPool{}).
		Watches(&corev1.Pod{}, byPoolAnnotation).
		WatchesRawSource(source.Channel(a.triggers, &handler.EnqueueRequestForObject{})).
		// One pass at a time (a node has one pool). Name validation is skipped because tests
		// run several agents in one process; a real agent runs one controller.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true)}).
		Complete(reconcile.Func(a.reconcile))
	if err != nil {
		return fmt.Errorf("setting up the pool reconciler: %w", err)
	}
	for _, r := range []manager.RunnableFunc{a.pollNodeCtl, a.renewLeases, a.watchManifests, a.serveShim} {
		if err := mgr.Add(r); err != nil {
			return err
		}
	}
	if k := a.opts.leaseToken; k != nil {
		if err := mgr.Add(manager.RunnableFunc(k.Run)); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("cache", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("informer caches not synced")
		}
		return nil
	})
}

// Run cleans up orphaned manifests (once, at start; docs/design.md §3.5), then runs the agent until
// ctx ends. The cleanup asks the API server about each file and keeps every file it cannot
// ask about, so an agent started while the API server is down removes nothing.
func (a *Agent) Run(ctx context.Context) error {
	log := logf.FromContext(ctx).WithValues("node", a.opts.NodeName)
	ctx = logf.IntoContext(ctx, log)
	s, err := Scheme()
	if err != nil {
		return err
	}
	direct, err := client.New(a.cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	report, err := manifest.CleanupOrphans(ctx, a.opts.ManifestDir, func(ctx context.Context, name string) (string, error) {
		var p v1alpha1.SandboxPool
		if err := direct.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return "", err
		}
		return string(p.UID), nil
	})
	if err != nil {
		log.Error(err, "orphan cleanup")
	}
	logOrphanReport(log, report)
	a.restore(ctx)
	if err := a.newManager(ctx); err != nil {
		return err
	}
	return a.mgr.Start(ctx)
}

// restore reads back what the agent kept across its restart: the state file and the node-ctl
// config it last wrote. What cannot be read is reported; the agent then knows less, and
// takes node-ctl to enforce what the rest says.
func (a *Agent) restore(ctx context.Context) {
	log := logf.FromContext(ctx)
	if err := a.loadState(); err != nil {
		log.Error(err, "the agent's state from before its start is lost; node-ctl's config file still bounds what node-ctl may enforce")
	}
	data, err := os.ReadFile(a.opts.NodeCtlConfig)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Error(err, "reading the node-ctl config file")
		}
		return
	}
	cfg, err := api.ParseConfig(data)
	if err != nil {
		log.Error(err, "the node-ctl config file does not parse", "file", a.opts.NodeCtlConfig)
		return
	}
	a.mu.Lock()
	a.sent = cfg
	a.mu.Unlock()
}

// trigger re-runs the reconcile of a pool.
func (a *Agent) trigger(pool string) {
	obj := &v1alpha1.SandboxPool{}
	obj.Name = pool
	select {
	case a.triggers <- event.GenericEvent{Object: obj}:
	default:
		// The channel is full: passes are queued anyway and each pass reads everything.
	}
}

// triggerAll re-runs the reconcile of every pool of the node.
func (a *Agent) triggerAll(ctx context.Context) {
	pools, err := a.pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		a.trigger(p.Name)
	}
}

// indexNode indexes pools and placeholder pods by spec.nodeName in the cache. An agent's own
// cache holds only its node's objects (filtered by the API server); a Fleet's shared cache
// holds every node's, and the index keeps each agent's lists to its node.
const indexNode = "spec.nodeName"

func indexByNode(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &v1alpha1.SandboxPool{}, indexNode, func(o client.Object) []string {
		return []string{o.(*v1alpha1.SandboxPool).Spec.NodeName}
	}); err != nil {
		return fmt.Errorf("indexing pools by node: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexNode, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	return nil
}

// pools lists this node's pools from the cache.
func (a *Agent) pools(ctx context.Context) ([]v1alpha1.SandboxPool, error) {
	var l v1alpha1.SandboxPoolList
	if err := a.client.List(ctx, &l, client.MatchingFields{indexNode: a.opts.NodeName}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// pool reads a pool of this node from the cache (which holds only this node's pools).
func (a *Agent) pool(ctx context.Context, name string) (*v1alpha1.SandboxPool, error) {
	var p v1alpha1.SandboxPool
	if err := a.client.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		return nil, err
	}
	if p.Spec.NodeName != a.opts.NodeName {
		return nil, apierrors.NewNotFound(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSandboxPools).GroupResource(), name)
	}
	return &p, nil
}
