// Package hollow plays many nodes in one process against a real API server, as kubemark's
// hollow nodes do: for each node the real placeholder-agent code (agent.Fleet) renews the
// pool's Lease, writes the manifest and reports status; node-ctl is simulated in process
// (NodeCtl) and one hollow kubelet (mirror pods, shim calls) serves every node. Manifests
// and node-ctl configs go to a scratch directory (best on tmpfs). cmd/hollow-nodes runs it;
// the scale benchmarks (tests/scale) use it in process.
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent"
)

// Options configure the hollow nodes.
type Options struct {
	// Nodes are the names of the nodes to play.
	Nodes []string
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
	began := time.Now()
	if _, err := Start(ctx, cfg, o); err != nil {
		return err
	}
	log.Info("hollow nodes running", "nodes", len(o.Nodes), "renewInterval", o.RenewInterval.String(),
		"churnPerMinute", o.Churn, "took", time.Since(began).Round(time.Millisecond).String())
	<-ctx.Done()
	return nil
}

// Nodes is a running set of hollow nodes.
type Nodes struct {
	opts    Options
	fleet   *agent.Fleet
	kubelet *kubelet

	mu       sync.Mutex // guards nodectls and ctx
	nodectls map[string]*NodeCtl
	ctx      context.Context
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
	n := &Nodes{opts: o, fleet: fleet, nodectls: map[string]*NodeCtl{}, ctx: ctx}
	writer, err := client.New(cfg, client.Options{Scheme: fleet.Client().Scheme()})
	if err != nil {
		return nil, err
	}
	n.kubelet = newKubelet(manifests, writer, func(node string) shim {
		if a := fleet.Agent(node); a != nil {
			return a.Shim()
		}
		return nil
	})
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
	_, err := n.fleet.Add(ctx, o)
	return err
}

// StopAgent stops the agent of node as a killed process stops: no more Lease renewals,
// polls, passes or shim answers. The node's pod and node-ctl keep running.
func (n *Nodes) StopAgent(node string) bool { return n.fleet.Stop(node) }

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

// CreateNodes creates Node objects with labels, workers at a time; existing ones are kept.
func CreateNodes(ctx context.Context, c client.Client, names []string, labels map[string]string, workers int) error {
	return Parallel(len(names), workers, func(i int) error {
		err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: labels}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
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
