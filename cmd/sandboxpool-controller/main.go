// Command sandboxpool-controller is the SandboxPool operator (docs/design.md §3.4): flags in, a
// controller-runtime manager with the class and pool controllers out. Run two or more
// replicas; leader election keeps one active.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/agentcube/sandboxpool/operator"
)

// version is set at build time (-ldflags "-X main.version=..."; make images sets it to
// VERSION).
var version = "dev"

func main() {
	opts := operator.DefaultOptions()
	opts.AddFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}

	log := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrllog.SetLogger(log)
	klog.SetLogger(log)
	log.Info("starting", "version", version)
	cfg, err := config.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		log.Error(err, "setting up the controller")
		os.Exit(1)
	}
	if err := mgr.Start(signals.SetupSignalHandler()); err != nil {
		log.Error(err, "controller failed")
		os.Exit(1)
	}
}
