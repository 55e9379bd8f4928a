package scale

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/hollow"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// idleNodes is the size of BenchmarkIdleCost's hollow cluster.
const idleNodes = 100

// idleRounds is how many times BenchmarkIdleCost makes every idle agent pass, and
// idleClassTouches how many reconciles of the class each round waits for.
const (
	idleRounds       = 10
	idleClassTouches = 5
)

// The functions whose CPU BenchmarkIdleCost attributes: an agent's pass over one pool, and
// the controller's reconcile of one pool and of one class. A sample counts for a function
// when the function is on its stack.
var idleCostFuncs = map[string]string{
	"agent-pass":      "/agent.(*Agent).sync",
	"pool-reconcile":  "/operator.(*PoolReconciler).Reconcile",
	"class-reconcile": "/operator.(*ClassReconciler).Reconcile",
}

// idleProfileEnv names a file to keep BenchmarkIdleCost's CPU profile in.
const idleProfileEnv = "SANDBOXPOOL_IDLE_PROFILE"

// The controller-runtime controllers that count those passes and reconciles.
var idleCostControllers = map[string]string{
	"agent-pass":      "placeholder-agent-fleet",
	"pool-reconcile":  "sandboxpool",
	"class-reconcile": "sandboxpoolclass",
}

// BenchmarkIdleCost measures what the agent and the controller spend when nothing changed:
// the CPU of an idle agent's pass over its pool, of the controller's reconcile of an
// unchanged pool, and of its reconcile of an unchanged class. A real API server, the
// controller and 100 hollow nodes (agent.Fleet: the agent's own pass, Lease and status
// code) run in this process; once every pool is Ready, each round touches every mirror pod
// (an annotation no one reads: each touch is one pass of its pool's agent, over a pool
// that did not change) and the class five times (an annotation: each one reconcile that
// finds nothing to do), while the controller's requeues at each Lease's expiry (TTL 4 s) reconcile the
// unchanged pools. A CPU profile at 1 kHz over the rounds attributes CPU to each pass and
// reconcile by the function on the stack; controller-runtime's own counters give how many
// there were.
//
//	make tools && KUBEBUILDER_ASSETS=$(ls -d .tools/controlplane-*) \
//	  go test -run '^$' -bench IdleCost -benchtime 1x ./tests/scale/
func BenchmarkIdleCost(b *testing.B) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cp, err := framework.Start()
	framework.Require(b, cp, err)
	b.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(b, cp)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	const leaseTTL = 4 * time.Second
	startController(ctx, b, e, leaseTTL)
	names := hollow.NodeNames("idle", idleNodes)
	if err := hollow.CreateNodes(ctx, e.admin, names, map[string]string{"pool": "idle"}, 8); err != nil {
		b.Fatal(err)
	}
	if _, err := hollow.Start(ctx, e.cp.Config, hollow.Options{Nodes: names, Dir: shmDir(b), RenewInterval: time.Second,
		LeaseTTL: leaseTTL, NodeCtlPollInterval: time.Second, Workers: 4}); err != nil {
		b.Fatal(err)
	}
	class := wrappers.MakeClass("idle").Selector("pool", "idle").Resources("500m", "256Mi").Obj()
	if err := e.admin.Create(ctx, class); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		ready, _ := countPhase(ctx, e, v1alpha1.PhaseReady)
		return ready == idleNodes, nil
	})
	if err != nil {
		b.Fatalf("the %d pools are not Ready within 3 minutes", idleNodes)
	}
	var pods corev1.PodList
	if err := e.admin.List(ctx, &pods, client.InNamespace(v1alpha1.DefaultPodNamespace), client.HasLabels{v1alpha1.LabelPoolName}); err != nil {
		b.Fatal(err)
	}
	if len(pods.Items) != idleNodes {
		b.Fatalf("%d mirror pods, want %d", len(pods.Items), idleNodes)
	}
	// Let the fan-out's last passes and writes settle.
	time.Sleep(5 * time.Second) // a settling pause before measuring, not synchronisation

	runtime.SetCPUProfileRate(1000) // StartCPUProfile keeps a rate set before it (and says so)
	var prof bytes.Buffer
	before := idleCounts(b)
	if err := pprof.StartCPUProfile(&prof); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	b.ResetTimer()
	for round := range idleRounds {
		passes := idleCounts(b)["agent-pass"]
		touch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.sandboxpool.io/touch":"%d"}}}`, round))
		for i := range pods.Items {
			if err := e.admin.Patch(ctx, &pods.Items[i], touch); err != nil {
				b.Fatal(err)
			}
		}
		for j := range idleClassTouches {
			classes := idleCounts(b)["class-reconcile"]
			touch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.sandboxpool.io/touch":"%d-%d"}}}`, round, j))
			if err := e.admin.Patch(ctx, class, touch); err != nil {
				b.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				return idleCounts(b)["class-reconcile"] > classes, nil
			})
			if err != nil {
				b.Fatalf("round %d: the class was not reconciled within a minute", round)
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return idleCounts(b)["agent-pass"] >= passes+idleNodes, nil
		})
		if err != nil {
			b.Fatalf("round %d: the agents did not pass over their %d pools within a minute", round, idleNodes)
		}
	}
	b.StopTimer()
	pprof.StopCPUProfile()
	window := time.Since(began)
	after := idleCounts(b)

	if path := os.Getenv(idleProfileEnv); path != "" {
		if err := os.WriteFile(path, prof.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	p, err := profile.Parse(bytes.NewReader(prof.Bytes()))
	if err != nil {
		b.Fatal(err)
	}
	cpu := map[string]time.Duration{}
	var total time.Duration
	for _, s := range p.Sample {
		d := time.Duration(s.Value[len(s.Value)-1]) // cpu nanoseconds
		total += d
		seen := map[string]bool{}
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				for what, fn := range idleCostFuncs {
					if !seen[what] && line.Function != nil && strings.HasSuffix(line.Function.Name, fn) {
						seen[what] = true
						cpu[what] += d
					}
				}
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total.Seconds()/window.Seconds(), "process-cores")
	for what := range idleCostFuncs {
		n := after[what] - before[what]
		b.ReportMetric(n, strings.Replace(what, "pass", "passe", 1)+"s")
		if n > 0 {
			b.ReportMetric(float64(cpu[what].Microseconds())/n, what+"-cpu-µs")
		}
	}
}

// idleCounts reads controller-runtime's count of reconciles (passes) per controller.
func idleCounts(b *testing.B) map[string]float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "controller" {
					continue
				}
				for what, ctrl := range idleCostControllers {
					if l.GetValue() == ctrl {
						out[what] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}
