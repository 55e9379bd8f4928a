// Package hollow plays many nodes in one process against a real API server, as kubemark's
// hollow nodes do: for each node the real placeholder-agent code (agent.Fleet) renews the
// pool's Lease, writes the manifest and reports status; node-ctl is simulated in process
// (NodeCtl), and one hollow kubelet serves every node's static pods (the placeholder pods'
// mirror pods, through the agent's shim API) and the pods the API server binds to them (a
// DaemonSet's), the same way for both. With Identities, every node writes as itself: its
// node identity (system:node:<name> in system:nodes) for pool status, events and its pods,
// its Lease identity (the per-node service account) for its Lease, so API Priority and
// Fairness, the Node authorizer, NodeRestriction, the admission policies and the webhook
// see N nodes. Reads share one cache (one watch of pools, one of pods). Manifests and
// node-ctl configs go to a scratch directory (best on tmpfs). cmd/hollow-nodes runs it as
// its own process; the scale benchmarks (tests/scale) start that process.
package hollow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent"
)

// Options configure the hollow nodes.
type Options struct {
	// Nodes are the names of the nodes to play.
	Nodes []string
	// Identities are the nodes' credentials (Identity); a node without one writes with the
	// base configuration's.
	Identities map[string]Identity
	// NodeQPS and NodeBurst are each node's client-side limits (kubelet's defaults, 50 and
	// 100, when 0); a negative NodeQPS disables the limit.
	NodeQPS   float32
	NodeBurst int
	// Dir is the scratch directory for manifests and node-ctl configs.
	Dir string
	// RenewInterval and LeaseTTL are the agents' --lease-renew-interval and --lease-ttl.
	RenewInterval, LeaseTTL time.Duration
	// NodeCtlPollInterval is the agents' --node-ctl-poll-interval.
	NodeCtlPollInterval time.Duration
	// StartSpread spreads the agents' starts (and so their renewals) over this long; 0 is
	// RenewInterval, negative starts them all at once.
	StartSpread time.Duration
	// Churn restarts this many random agents per minute (0: none), as agent restarts do.
	Churn float64
	// Workers is how many pool passes and how many hollow-kubelet syncs run at once.
	Workers int
	// MetricsAddr serves the agents' metrics, summed ("0" disables).
	MetricsAddr string
	// ControlAddr serves the control endpoint (control.go; "" disables).
	ControlAddr string
	// CreateNodes makes Run create the Node objects, with NodeLabels.
	CreateNodes bool
	NodeLabels  map[string]string
}

// Run creates the Node objects when asked, starts the hollow nodes and runs them until ctx
// ends (cmd/hollow-nodes).
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	log := logf.FromContext(ctx)
	if o.CreateNodes {
		c, err := client.New(cfg, client.Options{})
		if err != nil {
			return err
		}
		began := time.Now()
		if err := CreateNodes(ctx, c, o.Nodes, o.NodeLabels, 32); err != nil {
			return fmt.Errorf("creating the Node objects: %w", err)
		}
		log.Info("Node objects created", "nodes", len(o.Nodes), "took", time.Since(began).Round(time.Millisecond).String())
	}
	ctl := newControl()
	if o.ControlAddr != "" {
		if err := ctl.serve(ctx, o.ControlAddr); err != nil {
			return err
		}
	}
	began := time.Now()
	nodes, err := Start(ctx, cfg, o)
	if err != nil {
		return err
	}
	ctl.ready(nodes)
	log.Info("hollow nodes running", "nodes", len(o.Nodes), "identities", len(o.Identities), "renewInterval", o.RenewInterval.String(),
		"churnPerMinute", o.Churn, "took", time.Since(began).Round(time.Millisecond).String())
	<-ctx.Done()
	return nil
}

// Nodes is a running set of hollow nodes.
type Nodes struct {
	opts    Options
	base    *rest.Config
	reader  kubernetes.Interface
	fleet   *agent.Fleet
	kubelet *kubelet

	mu       sync.Mutex // guards the fields below
	nodectls map[string]*NodeCtl
	// clients are the nodes' own clients (uncached), made on first use.
	clients map[string]client.Client
	// stopped are the nodes whose agent and kubelet are stopped (StopNode).
	stopped map[string]bool
	// uids are the UIDs of the nodes' Node objects: a mirror pod's owner (kubelet's own Node).
	uids map[string]types.UID
	ctx  context.Context
}

// Start starts the shared agent manager, one agent and one simulated node-ctl per node, and
// the hollow kubelet; they run until ctx ends. The Node objects must exist (CreateNodes).
func Start(ctx context.Context, cfg *rest.Config, o Options) (*Nodes, error) {
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.RenewInterval <= 0 {
		o.RenewInterval = agent.DefaultOptions().LeaseRenewInterval
	}
	if o.NodeQPS == 0 {
		o.NodeQPS, o.NodeBurst = 50, 100
	}
	manifests := filepath.Join(o.Dir, "manifests")
	for _, d := range []string{manifests, filepath.Join(o.Dir, "nodectl")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating the scratch directory: %w", err)
		}
	}
	fleet, err := agent.NewFleet(cfg, agent.FleetOptions{Workers: o.Workers, MetricsAddr: o.MetricsAddr})
	if err != nil {
		return nil, err
	}
	n := &Nodes{opts: o, base: cfg, fleet: fleet, nodectls: map[string]*NodeCtl{}, clients: map[string]client.Client{},
		stopped: map[string]bool{}, uids: map[string]types.UID{}, ctx: ctx}
	played := make(map[string]bool, len(o.Nodes))
	for _, node := range o.Nodes {
		played[node] = true
	}
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	n.reader = reader
	if err := n.readNodes(ctx, ""); err != nil {
		return nil, err
	}
	n.kubelet, err = newKubelet(manifests, reader, func(node string) client.Client {
		if !played[node] {
			return nil
		}
		return n.client(node)
	}, n.nodeUID, func(node string) shim {
		if a := fleet.Agent(node); a != nil {
			return a.Shim()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	log := logf.FromContext(ctx)
	go func() {
		if err := fleet.Start(ctx); err != nil {
			log.Error(err, "hollow agents' manager")
		}
	}()
	if !fleet.WaitForCacheSync(ctx) {
		return nil, errors.New("hollow agents: the cache did not sync")
	}
	go func() {
		if err := n.kubelet.run(ctx, o.Workers); err != nil {
			log.Error(err, "hollow kubelet")
		}
	}()
	// Real agents start at unrelated times, so their renewals spread over the interval; the
	// hollow agents' starts are spread over one interval for the same effect (started all
	// at once, every renewal of the fleet would come in one burst).
	spread := o.StartSpread
	if spread == 0 {
		spread = o.RenewInterval
	}
	began := time.Now()
	for i, node := range o.Nodes {
		if err := n.StartAgent(node); err != nil {
			return nil, err
		}
		pace := began.Add(spread * time.Duration(i+1) / time.Duration(len(o.Nodes)))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(pace)): // pacing of the starts, not a synchronisation
		}
	}
	if o.Churn > 0 {
		go n.churn(ctx)
	}
	return n, nil
}

// readNodes reads the UIDs of the Node objects (of node alone, when not ""), as each
// kubelet knows its own Node.
func (n *Nodes) readNodes(ctx context.Context, node string) error {
	var items []corev1.Node
	if node == "" {
		l, err := n.reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("reading the Node objects: %w", err)
		}
		items = l.Items
	} else {
		o, err := n.reader.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Node %s: %w", node, err)
		}
		items = []corev1.Node{*o}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range items {
		n.uids[o.Name] = o.UID
	}
	return nil
}

// nodeUID is the UID of node's Node object as last read.
func (n *Nodes) nodeUID(node string) types.UID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.uids[node]
}

// client is node's own client, nil while the node is stopped.
func (n *Nodes) client(node string) client.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped[node] {
		return nil
	}
	if c := n.clients[node]; c != nil {
		return c
	}
	c, err := client.New(n.nodeConfig(node), client.Options{Scheme: n.fleet.Client().Scheme(), Mapper: n.fleet.Client().RESTMapper()})
	if err != nil {
		logf.FromContext(n.ctx).Error(err, "the client of a hollow node", "node", node)
		return nil
	}
	n.clients[node] = c
	return c
}

// nodeConfig is the configuration of node's own identity (the base one without Identities).
func (n *Nodes) nodeConfig(node string) *rest.Config {
	id, ok := n.opts.Identities[node]
	if !ok || id.NodeToken == "" {
		return n.base
	}
	return n.tokenConfig(id.NodeToken)
}

func (n *Nodes) tokenConfig(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(n.base)
	cfg.BearerToken = token
	cfg.QPS, cfg.Burst = n.opts.NodeQPS, n.opts.NodeBurst
	return cfg
}

// StartAgent starts (or restarts) the agent of node, as the agent's process (re)starting
// would: it holds nothing and re-derives everything.
func (n *Nodes) StartAgent(node string) error {
	n.mu.Lock()
	nc := n.nodectls[node]
	if nc == nil {
		nc = NewNodeCtl(n.configPath(node), "hollow")
		n.nodectls[node] = nc
	}
	ctx := n.ctx
	n.mu.Unlock()
	o := agent.DefaultOptions()
	o.NodeName, o.Version = node, "hollow"
	o.ManifestDir, o.NodeCtlConfig, o.NodeCtl = filepath.Join(n.opts.Dir, "manifests"), n.configPath(node), nc
	o.NodeCtlRestartCommand, o.NodeCtlStopCommand = "", ""
	o.StateFile = filepath.Join(n.opts.Dir, "state", node+".json")
	o.HealthzAddr, o.MetricsAddr = "0", "0"
	// Hollow nodes report no allocatable to check a growth against, and the hollow kubelet
	// admits every pod: growths go to it at once.
	o.ResizePreempt = true
	if n.opts.RenewInterval > 0 {
		o.LeaseRenewInterval = n.opts.RenewInterval
	}
	if n.opts.LeaseTTL > 0 {
		o.LeaseTTL = n.opts.LeaseTTL
	}
	if n.opts.NodeCtlPollInterval > 0 {
		o.NodeCtlPollInterval = n.opts.NodeCtlPollInterval
	}
	var id agent.Identity
	if creds, ok := n.opts.Identities[node]; ok && creds.NodeToken != "" {
		id.Config = n.tokenConfig(creds.NodeToken)
		if creds.LeaseToken != "" {
			id.LeaseConfig = n.tokenConfig(creds.LeaseToken)
		}
	}
	_, err := n.fleet.Add(ctx, o, id)
	return err
}

// StopAgent stops the agent of node as a killed process stops: no more Lease renewals,
// polls, passes or shim answers. The node's pod and node-ctl keep running.
func (n *Nodes) StopAgent(node string) bool { return n.fleet.Stop(node) }

// StopNode stops node as a lost machine stops: its agent and its kubelet. Its objects in
// the API server stay as they are.
func (n *Nodes) StopNode(node string) {
	n.mu.Lock()
	n.stopped[node] = true
	n.mu.Unlock()
	n.StopAgent(node)
}

// StartNode starts a stopped node again: its kubelet takes up its pods, its agent restarts.
func (n *Nodes) StartNode(node string) error {
	if err := n.readNodes(n.ctx, node); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.stopped, node)
	n.mu.Unlock()
	if err := n.StartAgent(node); err != nil {
		return err
	}
	n.kubelet.resyncNode(node)
	return nil
}

// NodeCtl is the simulated node-ctl of node (nil for a node not played).
func (n *Nodes) NodeCtl(node string) *NodeCtl {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodectls[node]
}

func (n *Nodes) configPath(node string) string {
	return filepath.Join(n.opts.Dir, "nodectl", node+".json")
}

// churn restarts Churn random agents per minute.
func (n *Nodes) churn(ctx context.Context) {
	tick := time.NewTicker(time.Duration(float64(time.Minute) / n.opts.Churn))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			node := n.opts.Nodes[rand.IntN(len(n.opts.Nodes))]
			if err := n.StartAgent(node); err != nil {
				logf.FromContext(ctx).Error(err, "churn: restarting an agent", "node", node)
			}
		}
	}
}

// CreateNodes creates Node objects with labels, workers at a time, and gives each the status
// a registered kubelet reports (capacity, Ready), so that the scheduler binds pods to them;
// existing ones are kept.
func CreateNodes(ctx context.Context, c client.Client, names []string, labels map[string]string, workers int) error {
	return Parallel(len(names), workers, func(i int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: labels}}
		err := c.Create(ctx, n)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return err
		}
		n.Status = NodeStatus()
		return c.Status().Update(ctx, n)
	})
}

// NodeStatus is the status of a hollow node: a large machine, Ready.
func NodeStatus() corev1.NodeStatus {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	now := metav1.Now()
	return corev1.NodeStatus{Capacity: res, Allocatable: res, Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "hollow node", LastHeartbeatTime: now, LastTransitionTime: now}}}
}

// NodeNames are count names prefix-00000, prefix-00001, ….
func NodeNames(prefix string, count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// Parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func Parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
