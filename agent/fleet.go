package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Fleet runs many agents in one process against one API server: the hollow-node mode of the
// scale benchmarks (tests/hollow), where one process plays N nodes. The agents share one
// manager — one cache of every pool and placeholder pod, indexed by node, instead of one
// server-filtered watch per node, and one client — and one controller whose passes go to
// the agent of the pool's node. Each agent runs its own Lease renewal and node-ctl poll and
// the same pass, status and Lease code as a placeholder-agent process. A fleet's agents
// serve no shim socket, health or metrics endpoint and watch no manifest directory: the
// caller plays kubelet and the shim, through Agent.Shim.
type Fleet struct {
	cfg      *rest.Config
	mgr      manager.Manager
	schema   *schema.Schema
	triggers chan event.GenericEvent

	mu sync.Mutex // guards the fields below
	// members are the running agents by node name.
	members map[string]*member
	// owner is the node of each pool as last seen, for passes about a deleted pool.
	owner map[string]string
}

type member struct {
	agent  *Agent
	cancel context.CancelFunc
}

// FleetOptions configure NewFleet.
type FleetOptions struct {
	// Workers is how many pool passes run at once (each agent still runs one at a time).
	Workers int
	// MetricsAddr serves the agents' metrics (summed over the fleet); "0" disables.
	MetricsAddr string
}

// NewFleet builds the shared manager. Run it with Start; add agents with Add once it runs.
func NewFleet(cfg *rest.Config, o FleetOptions) (*Fleet, error) {
	sch, err := schema.Compiled()
	if err != nil {
		return nil, fmt.Errorf("compiling the CUE schema: %w", err)
	}
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	hasPool, err := labels.NewRequirement(v1alpha1.LabelPoolName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*hasPool)},
		}},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&coordinationv1.Lease{}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the fleet's manager: %w", err)
	}
	if err := indexByNode(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, mgr: mgr, schema: sch, triggers: make(chan event.GenericEvent, 4096),
		members: map[string]*member{}, owner: map[string]string{}}
	byPoolAnnotation := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		if pool := o.GetAnnotations()[v1alpha1.AnnotationPoolName]; pool != "" {
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
		}
		return nil
	})
	err = ctrl.NewControllerManagedBy(mgr).
		Named("placeholder-agent-fleet").
		For(&v1alpha1.SandboxPool{}).
		Watches(&corev1.Pod{}, byPoolAnnotation).
		WatchesRawSource(source.Channel(f.triggers, &handler.EnqueueRequestForObject{})).
		// Each pool's retries back off on their own, as in a placeholder-agent process; the
		// default limiter's overall bucket (10/s) would throttle the whole fleet's retries as
		// if they were one agent's.
		WithOptions(controller.Options{MaxConcurrentReconciles: max(o.Workers, 1), SkipNameValidation: ptr.To(true),
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)}).
		Complete(reconcile.Func(f.reconcile))
	if err != nil {
		return nil, fmt.Errorf("setting up the fleet's reconciler: %w", err)
	}
	return f, nil
}

// Start runs the shared manager until ctx ends.
func (f *Fleet) Start(ctx context.Context) error { return f.mgr.Start(ctx) }

// WaitForCacheSync waits until the shared cache has synced (or ctx ends).
func (f *Fleet) WaitForCacheSync(ctx context.Context) bool {
	return f.mgr.GetCache().WaitForCacheSync(ctx)
}

// Client is the fleet's shared client (reads from its cache).
func (f *Fleet) Client() client.Client { return f.mgr.GetClient() }

// Identity is what one agent of a fleet writes with, as a placeholder-agent process on its
// node would: Config is the node's own identity (pool status, events), LeaseConfig its Lease
// identity (nil: Config). Reads still come from the fleet's shared cache. The zero Identity
// writes with the fleet's own credentials.
type Identity struct {
	Config, LeaseConfig *rest.Config
}

// Add starts an agent for o.NodeName: its Lease renewal and node-ctl poll until ctx ends or
// Stop, and its pools' passes, writing as id. The shim, health, metrics and manifest-watch
// options are ignored. An agent already running for the node is stopped first (a restart).
func (f *Fleet) Add(ctx context.Context, o Options, id Identity) (*Agent, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	a := newAgent(f.cfg, o, f.schema, f.triggers)
	a.mgr, a.client, a.reader = f.mgr, f.mgr.GetClient(), f.mgr.GetAPIReader()
	a.recorder = f.mgr.GetEventRecorder(v1alpha1.FieldManagerAgent)
	ctx, cancel := context.WithCancel(logf.IntoContext(ctx, logf.FromContext(ctx).WithValues("node", o.NodeName)))
	if err := f.useIdentity(ctx, a, id); err != nil {
		cancel()
		return nil, err
	}
	a.restore(ctx)
	f.Stop(o.NodeName)
	f.mu.Lock()
	f.members[o.NodeName] = &member{agent: a, cancel: cancel}
	f.mu.Unlock()
	go func() { _ = a.pollNodeCtl(ctx) }()
	go func() { _ = a.renewLeases(ctx) }()
	a.triggerAll(ctx)
	return a, nil
}

// useIdentity gives a the clients and event recorder of id: writes with id's credentials,
// reads from the fleet's cache. The recorder stops with ctx.
func (f *Fleet) useIdentity(ctx context.Context, a *Agent, id Identity) error {
	opts := func() client.Options {
		return client.Options{Scheme: f.mgr.GetScheme(), Mapper: f.mgr.GetRESTMapper(),
			Cache: &client.CacheOptions{Reader: f.mgr.GetCache(), DisableFor: []client.Object{&coordinationv1.Lease{}}}}
	}
	if id.Config != nil {
		c, err := client.New(id.Config, opts())
		if err != nil {
			return fmt.Errorf("the client of node %s: %w", a.opts.NodeName, err)
		}
		hc, err := rest.HTTPClientFor(id.Config)
		if err != nil {
			return fmt.Errorf("the event client of node %s: %w", a.opts.NodeName, err)
		}
		ev, err := eventsv1client.NewForConfigAndClient(id.Config, hc)
		if err != nil {
			return fmt.Errorf("the event client of node %s: %w", a.opts.NodeName, err)
		}
		b := events.NewBroadcaster(&events.EventSinkImpl{Interface: ev})
		b.StartRecordingToSink(ctx.Done())
		rec, ok := b.NewRecorder(f.mgr.GetScheme(), v1alpha1.FieldManagerAgent).(recorder.EventRecorder)
		if !ok {
			return fmt.Errorf("the event recorder of node %s records no annotated events", a.opts.NodeName)
		}
		a.client, a.recorder = c, rec
	}
	if id.LeaseConfig != nil {
		c, err := client.New(id.LeaseConfig, opts())
		if err != nil {
			return fmt.Errorf("the Lease client of node %s: %w", a.opts.NodeName, err)
		}
		a.leaseClient = c
	}
	return nil
}

// Stop stops the agent of node as a killed process would stop: no more renewals, polls or
// passes. It reports whether one was running.
func (f *Fleet) Stop(node string) bool {
	f.mu.Lock()
	m := f.members[node]
	delete(f.members, node)
	f.mu.Unlock()
	if m != nil {
		m.cancel()
	}
	return m != nil
}

// Agent is the running agent of node, nil when none.
func (f *Fleet) Agent(node string) *Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.members[node]; m != nil {
		return m.agent
	}
	return nil
}

// reconcile hands a pool's pass to the agent of its node.
func (f *Fleet) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p v1alpha1.SandboxPool
	err := f.mgr.GetClient().Get(ctx, req.NamespacedName, &p)
	f.mu.Lock()
	node := f.owner[req.Name]
	switch {
	case err == nil:
		node = p.Spec.NodeName
		f.owner[req.Name] = node
	case apierrors.IsNotFound(err):
		delete(f.owner, req.Name)
	default:
		f.mu.Unlock()
		return ctrl.Result{}, err
	}
	m := f.members[node]
	f.mu.Unlock()
	if m == nil {
		return ctrl.Result{}, nil
	}
	return m.agent.reconcile(logf.IntoContext(ctx, logf.FromContext(ctx).WithValues("node", node)), req)
}

// Shim is the agent's side of the placeholder shim API, for a caller that plays the shim
// in process (the hollow kubelet).
func (a *Agent) Shim() shimapi.Service { return shimService{a: a} }
