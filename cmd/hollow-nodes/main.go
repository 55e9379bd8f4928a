// Command hollow-nodes plays N nodes against a real API server, as kubemark's hollow nodes
// do: one placeholder-agent per node (the real Lease, pass and status code, sharing one
// cache), node-ctl simulated in process, one hollow kubelet for the mirror pods and the pods
// bound to the nodes. With --identities each node writes as itself. For the scale
// benchmarks (docs/benchmarks.md); see tests/hollow.
package main

import (
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/agentcube/sandboxpool/tests/hollow"
)

func main() {
	var (
		o       hollow.Options
		n       int
		prefix  string
		label   string
		qps     float64
		ids     string
		nodeQPS float64
	)
	flag.IntVar(&n, "nodes", 100, "How many hollow nodes to play.")
	flag.StringVar(&prefix, "node-prefix", "hollow-node", "Node names are <prefix>-00000, <prefix>-00001, ….")
	flag.BoolVar(&o.CreateNodes, "create-nodes", true, "Create the Node objects (kept if they exist).")
	flag.StringVar(&label, "node-label", "sandbox-pool.io/hollow=true", "Label key=value of the created Node objects.")
	flag.StringVar(&o.Dir, "dir", "/dev/shm/hollow-nodes", "Scratch directory for manifests and node-ctl configs (tmpfs: no fsync cost).")
	flag.DurationVar(&o.RenewInterval, "lease-renew-interval", 10*time.Second, "Each agent's --lease-renew-interval.")
	flag.DurationVar(&o.LeaseTTL, "lease-ttl", 40*time.Second, "Each agent's --lease-ttl.")
	flag.DurationVar(&o.NodeCtlPollInterval, "node-ctl-poll-interval", 5*time.Second, "Each agent's --node-ctl-poll-interval (in process, no API calls).")
	flag.Float64Var(&o.Churn, "churn", 0, "Agent restarts per minute (random nodes).")
	flag.IntVar(&o.Workers, "workers", 16, "Pool passes and hollow-kubelet syncs run at once.")
	flag.StringVar(&ids, "identities", "", "File of the nodes' credentials, a line \"<node> <node token> <Lease token>\" each (tests/hollow.WriteIdentities); without it every node writes as --kubeconfig's identity.")
	flag.StringVar(&o.ControlAddr, "control-addr", "", "Address of the control endpoint (/readyz, /nodes/stop, /nodes/start; empty disables).")
	flag.StringVar(&o.MetricsAddr, "metrics-addr", "0", "Address of the agents' summed /metrics (\"0\" disables).")
	flag.Float64Var(&qps, "kube-api-qps", -1, "Client-side QPS limit of the shared reader, and of every node's client without --identities (-1: none).")
	flag.Float64Var(&nodeQPS, "node-api-qps", 50, "Client-side QPS limit of each node's own client (--identities; kubelet's default; -1: none).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	log := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrllog.SetLogger(log)
	klog.SetLogger(log)
	o.Nodes = hollow.NodeNames(prefix, n)
	o.NodeQPS, o.NodeBurst = float32(nodeQPS), max(1, int(2*nodeQPS))
	if k, v, ok := strings.Cut(label, "="); ok {
		o.NodeLabels = map[string]string{k: v}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	cfg.QPS = float32(qps)
	if ids != "" {
		if o.Identities, err = hollow.ReadIdentities(ids); err != nil {
			log.Error(err, "reading --identities")
			os.Exit(1)
		}
	}
	ctx := ctrllog.IntoContext(signals.SetupSignalHandler(), log)
	if err := hollow.Run(ctx, cfg, o); err != nil {
		log.Error(err, "hollow nodes failed")
		os.Exit(1)
	}
}
