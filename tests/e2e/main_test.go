// Package e2e tests the whole system on one machine, a one-node cluster (tests/e2e/stack):
// a real etcd and kube-apiserver with the Node authorizer, kube-controller-manager and
// kube-scheduler; the cluster half applied from deploy/ (`kubectl apply -k`, the images of
// `make images`), so the controller and the admission webhook run as the Pods of their
// Deployments and every test also proves the manifests; and one node — containerd 2.4.2
// with runc and the placeholder runtime handler, the node half installed by
// deploy/node/install.sh (shim, the reference node-ctl on a real cgroup, the placeholder
// agent), a real kubelet v1.37.2 as system:node:e2e-node, and kube-proxy. The stack starts
// once for the package (TestMain); a test that breaks something restores it. Minute-scale
// timers are shortened by flags (suiteTimers). It needs root and the tools `make tools`
// builds; without them the tests skip, or fail under SANDBOXPOOL_REQUIRE_TOOLS (make test).
//
// The API server runs the NodeRestriction admission plugin, as most production clusters
// do. Under it a node identity may write no Lease but its own in kube-node-lease, so the
// agent renews its pool's Lease as the node's service account
// sandbox-pool-node-lease/placeholder-agent-<node> (--lease-kubeconfig) and does everything
// else as system:node:<name>.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
	"github.com/agentcube/sandboxpool/tests/framework"
)

const (
	nodeName = "e2e-node"
	// nodeLabel is what the suite's class selects; kubelet registers the node with it.
	nodeLabelKey, nodeLabelValue = "sandbox.agentcube.io/pool", "e2e"
	zone                         = "e2e-zone"
	// dirPrefix names the stack's directory in /tmp (not $TMPDIR: unix socket paths must
	// stay under 108 bytes).
	dirPrefix = "spe2e"
)

// suiteTimers shorten the components' minute-scale timers so their effects show in seconds.
func suiteTimers() stack.Timers {
	return stack.Timers{
		NodeCtlPollInterval:    300 * time.Millisecond,
		ManifestVerifyInterval: 2 * time.Second,
		LeaseRenewInterval:     time.Second,
		LeaseTTL:               4 * time.Second,
		DeferredWarningAfter:   3 * time.Second,
		PieceStartTimeout:      15 * time.Second,
		NodeCtlUnreadyAfter:    6 * time.Second,
		FinalizerTimeout:       5 * time.Minute,
	}
}

var (
	suite struct {
		s           *stack.Stack
		err         error
		unavailable string
	}
	k8s  client.Client // cluster admin, uncached
	kube *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the controller-runtime client's own log
	tools := stack.ToolsFromEnv()
	suite.unavailable = tools.Unavailable()
	var dir string
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s e2e stack: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(f, a...))
	}
	iptablesBefore := -1
	if suite.unavailable == "" {
		unlock, err := stack.LockMachine(logf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer unlock()
		stack.CleanStale(filepath.Join("/tmp", dirPrefix+"*"), logf)
		// iptables-save comes with the packages the stack installs on a fresh machine.
		suite.err = stack.EnsureHostPackages(context.Background(), logf)
		if suite.err == nil {
			iptablesBefore, suite.err = stack.KubeIptablesLines()
		}
		if suite.err == nil {
			dir, suite.err = os.MkdirTemp("/tmp", dirPrefix)
		}
		if suite.err == nil {
			suite.s, suite.err = stack.Start(context.Background(), stack.Options{
				Dir: dir, NodeName: nodeName, NodeLabels: map[string]string{nodeLabelKey: nodeLabelValue}, Zone: zone,
				Tools: tools, Images: os.Getenv(stack.ImagesEnv), Timers: suiteTimers(), NodeRestriction: true, Logf: logf,
			})
		}
		if suite.err == nil {
			suite.err = clients(suite.s)
		}
	}
	code := m.Run()
	if suite.s != nil {
		if err := suite.s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the stack:", err)
			code = 1
		}
		// The host as it was: kube-proxy's iptables rules are gone with the stack.
		if after, err := stack.KubeIptablesLines(); err != nil || after != iptablesBefore {
			fmt.Fprintf(os.Stderr, "e2e: the stack left iptables rules behind: %d KUBE-* lines before it, %d after (%v)\n", iptablesBefore, after, err)
			code = 1
		}
	}
	if dir != "" {
		if code == 0 {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "e2e: logs of every component kept in %s/logs\n", dir)
		}
	}
	os.Exit(code)
}

func clients(s *stack.Stack) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	// The tests' own reads must not queue behind client-go's default 5 requests/s: the lock
	// watcher reads every 10 ms.
	cfg := rest.CopyConfig(s.Admin)
	cfg.QPS, cfg.Burst = -1, 0
	var err error
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	kube, err = kubernetes.NewForConfig(cfg)
	return err
}

// requireStack returns the running stack, skipping t when it cannot run here (or failing
// it under SANDBOXPOOL_REQUIRE_TOOLS), and failing t when it did not start. A failed test
// gets the end of every component's log.
func requireStack(t *testing.T) *stack.Stack {
	t.Helper()
	if suite.unavailable != "" {
		if os.Getenv(framework.RequireToolsEnv) != "" {
			t.Fatalf("end-to-end stack required but unavailable: %s", suite.unavailable)
		}
		t.Skip(suite.unavailable)
	}
	if suite.err != nil {
		t.Fatalf("starting the end-to-end stack: %v", suite.err)
	}
	s := suite.s
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range []*stack.Proc{s.Agent.Proc, s.Kubelet, s.NodeCtl.Proc, s.Containerd, s.KubeProxy.Proc, s.ControllerManager} {
			t.Logf("--- last lines of %s (%s):\n%s", p.Name, p.Log, indent(p.Tail(25)))
		}
		for _, d := range []string{stack.ControllerDeployment, stack.WebhookDeployment} {
			pods, err := s.ClusterPods(context.Background(), d)
			if err != nil {
				t.Logf("--- pods of %s: %v", d, err)
			}
			for _, p := range pods {
				t.Logf("--- last lines of pod %s (%s):\n%s", p.Name, p.Status.Phase, indent(s.PodLog(p.Namespace, p.Name, 25)))
			}
		}
	})
	return s
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
