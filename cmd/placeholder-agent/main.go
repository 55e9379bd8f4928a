// Command placeholder-agent is the SandboxPool node agent (docs/design.md §3.5): flags in, agent.Run
// out. It runs on every node as a systemd service (deploy/node/placeholder-agent.service).
package main

import (
	"flag"
	"os"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/agentcube/sandboxpool/agent"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	opts := agent.DefaultOptions()
	opts.Version = version
	opts.AddFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	log := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrllog.SetLogger(log)
	klog.SetLogger(log)
	cfg, err := config.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	a, err := agent.New(cfg, opts)
	if err != nil {
		log.Error(err, "setting up the agent")
		os.Exit(1)
	}
	if err := a.Run(signals.SetupSignalHandler()); err != nil {
		log.Error(err, "agent failed")
		os.Exit(1)
	}
}
