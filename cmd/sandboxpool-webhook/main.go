// Command sandboxpool-webhook is the SandboxPool validating admission webhook: flags in,
// webhook.Run out. See docs/webhook.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/agentcube/sandboxpool/webhook"
)

// version is set at build time (-ldflags "-X main.version=..."; make images sets it to
// VERSION).
var version = "dev"

func main() {
	opts := webhook.DefaultOptions()
	flag.StringVar(&opts.Addr, "addr", opts.Addr, "HTTPS listen address of the admission webhook")
	flag.StringVar(&opts.CertDir, "cert-dir", opts.CertDir, "directory holding tls.crt and tls.key (reloaded when they change)")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", opts.MetricsAddr, "listen address of /metrics")
	flag.StringVar(&opts.HealthAddr, "health-addr", opts.HealthAddr, "listen address of /healthz and /readyz")
	users := flag.String("controller-usernames", strings.Join(opts.ControllerUsernames, ","), "comma-separated usernames of the SandboxPool controller")
	groups := flag.String("controller-groups", strings.Join(opts.ControllerGroups, ","), "comma-separated groups whose members act as the SandboxPool controller")
	opUsers := flag.String("operator-usernames", strings.Join(opts.OperatorUsernames, ","), "comma-separated usernames holding the sandbox-pool-operator role (they may change a pool's spec.override only)")
	opGroups := flag.String("operator-groups", strings.Join(opts.OperatorGroups, ","), "comma-separated groups holding the sandbox-pool-operator role (they may change a pool's spec.override only)")
	flag.StringVar(&opts.PolicyBundle, "policy-bundle", "", "OPA bundle (directory or .tar.gz) to use instead of the embedded policy")
	flag.DurationVar(&opts.ShutdownDelay, "shutdown-delay", opts.ShutdownDelay, "how long to keep answering after SIGTERM (not ready, closing each connection after its answer) before shutting down: the time the cluster takes to stop sending requests to this replica")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	opts.ControllerUsernames, opts.ControllerGroups = list(*users), list(*groups)
	opts.OperatorUsernames, opts.OperatorGroups = list(*opUsers), list(*opGroups)

	log := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrllog.SetLogger(log)
	klog.SetLogger(log) // client-go's informer errors (e.g. a forbidden list) in the same log
	log.Info("starting", "version", version)
	cfg, err := config.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	if err := webhook.Run(signals.SetupSignalHandler(), cfg, opts, log); err != nil {
		log.Error(err, "webhook failed")
		os.Exit(1)
	}
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
