package scale

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/agent/hollow"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// Settings of the hollow-node scale runs (make bench-scale), from the environment.
const (
	hollowSizesEnv  = "SANDBOXPOOL_HOLLOW_SIZES"   // default 1000,5000,10000
	hollowSteadyEnv = "SANDBOXPOOL_HOLLOW_STEADY"  // steady-state window at the largest size, default 5m
	hollowLimitEnv  = "SANDBOXPOOL_HOLLOW_LIMIT"   // per-phase deadline, default 8m
	hollowReportEnv = "SANDBOXPOOL_HOLLOW_REPORT"  // where the figures go (docs/benchmarks.md section, PNGs), default none
	hollowNotRunEnv = "SANDBOXPOOL_HOLLOW_NOT_RUN" // sizes left out of this run because they do not fit its time
)

const (
	// benchQPS is the client-side limit of the controller and of kube-controller-manager in
	// these runs: high enough that the API server, not the client, bounds both.
	benchQPS, benchBurst = 1000, 2000
	dsNamespace          = "bench-ds"
	renewInterval        = 10 * time.Second // the agents' and the design's default
	leaseTTL             = 40 * time.Second
)

// scaleResult is what one size measured; the report and the plots are made from these.
type scaleResult struct {
	N                                            int
	Nodes, Plain, DaemonSet, Exist, Ready        time.Duration
	ReadyCount, DSCount                          int
	Snapshots, Applied, AppliedStatus            time.Duration
	DetectP50, DetectP99, PastTTLP50, PastTTLP99 time.Duration
	NodeNotFoundP50, NodeNotFoundP99             time.Duration
	HollowStart                                  time.Duration
	Fanout                                       map[string]framework.Usage // during fan-out, per process (CPU delta in .CPU)
	FanoutCores                                  map[string]float64
	Load                                         [3]string
	Notes                                        []string
	Steady                                       *steadyResult
}

type steadyResult struct {
	Window    time.Duration
	Rates     []rate // by verb and resource, requests per second
	Cores     map[string]float64
	RSSMiB    map[string]int
	Webhook   *webhookResult
	Load      [3]string
	LeaseWant float64
}

type rate struct {
	Verb, Resource string
	PerSecond      float64
}

type webhookResult struct {
	Requests                        int
	P50, P99, Max, BaseP50, BaseP99 time.Duration
}

var poolGVK = v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.KindSandboxPool)

func hollowSizes(t *testing.T) []int {
	s := os.Getenv(hollowSizesEnv)
	if s == "" {
		s = "1000,2000"
	}
	return parseSizes(t, s)
}

func parseSizes(t *testing.T, s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("sizes: %q is not a number", f)
		}
		out = append(out, n)
	}
	return out
}

func durationEnv(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// TestHollowScale runs the scenarios of the scale issue with hollow nodes against one real
// etcd + kube-apiserver per size: fan-out (controller vs kube-controller-manager's DaemonSet
// controller vs a plain create loop), steady state at the largest size (the API server's own
// request counters, CPU and RSS), a policy change, detection of stopped agents and deleted
// nodes. It prints FIGURE lines and asserts nothing about time.
func TestHollowScale(t *testing.T) {
	if os.Getenv(BenchEnv) == "" {
		t.Skipf("set %s=1 to run the hollow-node scale scenarios (make bench-scale)", BenchEnv)
	}
	if why := framework.Unavailable(); why != "" {
		t.Fatal(why)
	}
	kcm := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(kcm); err != nil {
		t.Fatalf("kube-controller-manager missing (make kube-controller-manager): %v", err)
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	sizes := hollowSizes(t)
	began := time.Now()
	var results []*scaleResult
	for i, n := range sizes {
		largest := i == len(sizes)-1
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			r := runHollowSize(t, n, largest, kcm)
			results = append(results, r)
		})
	}
	t.Logf("FIGURE hollow-scale total wall time %s for sizes %v", time.Since(began).Round(time.Second), sizes)
	notRun := notRunSizes(t, results)
	if dir := os.Getenv(hollowReportEnv); dir != "" {
		if err := writeScaleReport(dir, results, notRun, time.Since(began)); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

func loadAvg() [3]string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	var out [3]string
	copy(out[:], f)
	return out
}

func runHollowSize(t *testing.T, n int, largest bool, kcm string) *scaleResult {
	r := &scaleResult{N: n, Load: loadAvg(), FanoutCores: map[string]float64{}, Fanout: map[string]framework.Usage{}}
	limit := durationEnv(t, hollowLimitEnv, 8*time.Minute)
	cp, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(t, cp)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pids := map[string]int{"test+hollow": os.Getpid()}
	if pids["kube-apiserver"], err = cp.APIServerPID(); err != nil {
		t.Fatal(err)
	}
	if pids["etcd"], err = cp.EtcdPID(); err != nil {
		t.Fatal(err)
	}

	// Nodes.
	names := hollow.NodeNames("hollow", n)
	start := time.Now()
	if err := hollow.CreateNodes(ctx, e.admin, names, map[string]string{"pool": "scale"}, 64); err != nil {
		t.Fatal(err)
	}
	r.Nodes = time.Since(start)

	// 1a. The physical limit: a plain, unthrottled create loop of the N pools, then removed.
	start = time.Now()
	if err := hollow.Parallel(n, loopWorkers, func(i int) error {
		return e.admin.Create(ctx, wrappers.MakePool(names[i]).Class("plain").Resources("1", "1Gi").Obj())
	}); err != nil {
		t.Fatal(err)
	}
	r.Plain = time.Since(start)
	if err := e.admin.DeleteAllOf(ctx, &v1alpha1.SandboxPool{}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, e, 0, limit)

	// 1b. kube-controller-manager's DaemonSet controller, alone on the API server.
	r.DaemonSet, r.DSCount = daemonSetFanout(t, ctx, e, kcm, n, limit)
	if r.DSCount < n {
		r.Notes = append(r.Notes, fmt.Sprintf("DaemonSet: only %d of %d pods within %s", r.DSCount, n, limit))
	}

	// 1c. The controller (its binary, its identity) and the hollow nodes.
	ctrl := startControllerProcess(t, e, leaseTTL)
	if dbg := os.Getenv("SANDBOXPOOL_HOLLOW_DEBUG"); dbg != "" {
		t.Cleanup(func() {
			_ = os.WriteFile(filepath.Join(dbg, fmt.Sprintf("controller-%d.log", n)), []byte(ctrl.Output()), 0o644)
		})
	}
	start = time.Now()
	// The hollow nodes stay exempt from API Priority and Fairness (system:masters). Under a
	// node identity all N would be one user, one APF flow, fair-queued as one kubelet: at
	// 1,000 nodes 4 pools were Ready after 6 minutes. N real kubelets are N flows.
	nodes, err := hollow.Start(ctx, cp.Config, hollow.Options{Nodes: names, Dir: shmDir(t),
		RenewInterval: renewInterval, LeaseTTL: leaseTTL, NodeCtlPollInterval: 5 * time.Second, Workers: 64})
	if err != nil {
		t.Fatal(err)
	}
	r.HollowStart = time.Since(start)
	pids["controller"] = ctrl.Pid()
	before := usages(t, pids)
	r.Exist, r.Ready, r.ReadyCount = classFanout(t, ctx, e, n, limit)
	after := usages(t, pids)
	if os.Getenv("SANDBOXPOOL_HOLLOW_DEBUG") != "" {
		debugTimeline(t, ctx, e, names)
	}
	for k := range pids {
		r.FanoutCores[k] = after[k].CoresSince(before[k])
		r.Fanout[k] = after[k]
	}
	t.Logf("FIGURE nodes=%d node-objects=%s plain-create-loop=%s daemonset-pods=%s (%d) pools-exist=%s pools-ready=%s (%d) ratio-exist/plain=%.2f ratio-exist/daemonset=%.2f hollow-start=%s load=%v",
		n, r.Nodes.Round(time.Millisecond), r.Plain.Round(time.Millisecond), r.DaemonSet.Round(time.Millisecond), r.DSCount,
		r.Exist.Round(time.Millisecond), r.Ready.Round(time.Millisecond), r.ReadyCount,
		r.Exist.Seconds()/r.Plain.Seconds(), r.Exist.Seconds()/r.DaemonSet.Seconds(), r.HollowStart.Round(time.Millisecond), r.Load)
	t.Logf("FIGURE nodes=%d fan-out cpu (cores) %s; rss (MiB) %s", n, fmtCores(r.FanoutCores), fmtRSS(r.Fanout))
	if r.ReadyCount < n {
		r.Notes = append(r.Notes, fmt.Sprintf("only %d of %d pools Ready within %s", r.ReadyCount, n, limit))
	}

	// 2 and 5. Steady state (largest size only), then the webhook under that load.
	if steady := durationEnv(t, hollowSteadyEnv, 5*time.Minute); largest && steady > 0 {
		r.Steady = steadyState(t, ctx, e, n, pids, steady)
		r.Steady.Webhook = webhookUnderLoad(t, ctx, e, names[0], time.Minute)
	}

	// 3. Detection: 1 % of the agents stop (names[0], the webhook probe's node, among them:
	// the probe's status patches took fields the agent owns); then 1 % of other nodes are
	// deleted.
	k := max(n/100, 1)
	r.DetectP50, r.DetectP99, r.PastTTLP50, r.PastTTLP99 = detectStopped(t, ctx, e, nodes, names[:k], limit)
	r.NodeNotFoundP50, r.NodeNotFoundP99 = detectDeleted(t, ctx, e, names[k:2*k], limit)

	// 4. Policy change, over the nodes whose agents still run (SANDBOXPOOL_HOLLOW_POLICY=0
	// leaves it out, for a fan-out-only run of a size beyond the budget).
	if os.Getenv("SANDBOXPOOL_HOLLOW_POLICY") == "0" {
		return r
	}
	r.Snapshots, r.Applied, r.AppliedStatus = policyChange(t, ctx, e, nodes, names[2*k:], limit)
	if r.AppliedStatus >= limit {
		r.Notes = append(r.Notes, fmt.Sprintf("the policy change did not reach every node within %s", limit))
	}
	return r
}

func fmtCores(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func fmtRSS(m map[string]framework.Usage) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d/%d(peak)", k, m[k].RSSKiB/1024, m[k].HWMKiB/1024))
	}
	return strings.Join(parts, " ")
}

func usages(t *testing.T, pids map[string]int) map[string]framework.Usage {
	out := map[string]framework.Usage{}
	for k, pid := range pids {
		out[k] = sample(t, pid)
	}
	return out
}

// startControllerProcess runs the sandboxpool-controller binary as its service account.
func startControllerProcess(t *testing.T, e *env, ttl time.Duration) *support.Proc {
	bin, err := support.BuildBinary(e.cp.Root, e.dir, "./cmd/sandboxpool-controller")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := e.cp.KubeconfigFor(e.dir, controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	return support.StartProcess(t, "controller", bin, "--kubeconfig", kc, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--lease-ttl="+ttl.String(),
		fmt.Sprintf("--kube-api-qps=%d", benchQPS), fmt.Sprintf("--kube-api-burst=%d", benchBurst))
}

// daemonSetFanout runs kube-controller-manager with only the DaemonSet controller, creates
// a DaemonSet selecting the N nodes and times until all its pods exist. The controller
// manager is stopped afterwards; the pods stay (no garbage collector runs), as a real
// cluster's DaemonSet pods would.
func daemonSetFanout(t *testing.T, ctx context.Context, e *env, kcm string, n int, limit time.Duration) (time.Duration, int) {
	// kube-controller-manager's own user name: its built-in FlowSchema (workload-high).
	fairUser(t, e, "system:kube-controller-manager", "system:authenticated")
	kc, err := e.cp.KubeconfigFor(e.dir, "system:kube-controller-manager", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := e.cp.Kubectl(ctx, nil, "create", "namespace", dsNamespace); err != nil {
		t.Fatalf("namespace: %v: %s", err, stderr)
	}
	if _, stderr, err := e.cp.Kubectl(ctx, nil, "create", "serviceaccount", "default", "-n", dsNamespace); err != nil {
		t.Fatalf("service account: %v: %s", err, stderr)
	}
	proc := support.StartProcess(t, "kube-controller-manager", kcm, "--kubeconfig", kc, "--controllers=daemonset",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		fmt.Sprintf("--kube-api-qps=%d", benchQPS), fmt.Sprintf("--kube-api-burst=%d", benchBurst))
	defer func() { _ = proc.Stop(15 * time.Second) }()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := watchAll(t, wctx, e.admin, func() client.ObjectList { return &corev1.PodList{} }, client.InNamespace(dsNamespace))
	labels := map[string]string{"app": "bench-ds"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dsNamespace, Name: "bench"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                 map[string]string{"pool": "scale"},
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					AutomountServiceAccountToken: new(bool),
					Containers:                   []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	start := time.Now()
	if err := e.admin.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(limit)
	for len(seen) < n {
		select {
		case o := <-events:
			seen[o.GetName()] = true
		case <-deadline:
			return limit, len(seen)
		}
	}
	return time.Since(start), len(seen)
}

// classFanout creates a class selecting the N nodes and times until all pools exist and
// until all are Ready, from one watch.
func classFanout(t *testing.T, ctx context.Context, e *env, n int, limit time.Duration) (exist, ready time.Duration, readyCount int) {
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := watchAll(t, wctx, e.admin, func() client.ObjectList { return &v1alpha1.SandboxPoolList{} })
	start := time.Now()
	if err := e.admin.Create(ctx, wrappers.MakeClass("scale").Selector("pool", "scale").Resources("1", "1Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	seen, isReady := map[string]bool{}, map[string]bool{}
	exist = limit
	deadline := time.After(limit)
	for len(isReady) < n {
		select {
		case o := <-events:
			p := o.(*v1alpha1.SandboxPool)
			if !seen[p.Name] {
				seen[p.Name] = true
				if len(seen) == n {
					exist = time.Since(start)
				}
			}
			if p.Status.Phase == v1alpha1.PhaseReady {
				isReady[p.Name] = true
			}
		case <-deadline:
			return exist, limit, len(isReady)
		}
	}
	return exist, time.Since(start), len(isReady)
}

// steadyState reads the API server's request counters at the start and end of window and
// the processes' CPU and RSS over it.
func steadyState(t *testing.T, ctx context.Context, e *env, n int, pids map[string]int, window time.Duration) *steadyResult {
	cs, err := kubernetes.NewForConfig(e.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	s := &steadyResult{Window: window, Cores: map[string]float64{}, RSSMiB: map[string]int{}, Load: loadAvg(),
		LeaseWant: float64(n) / renewInterval.Seconds()}
	// Let the fan-out's last writes drain (one renewal interval), then measure.
	time.Sleep(renewInterval) // settling period, not a synchronisation
	c0 := requestCounts(t, ctx, cs)
	u0 := usages(t, pids)
	time.Sleep(window) // the window under observation
	c1 := requestCounts(t, ctx, cs)
	u1 := usages(t, pids)
	for k, v := range c1 {
		if d := v - c0[k]; d > 0 {
			verb, res, _ := strings.Cut(k, " ")
			s.Rates = append(s.Rates, rate{Verb: verb, Resource: res, PerSecond: d / window.Seconds()})
		}
	}
	slices.SortFunc(s.Rates, func(a, b rate) int {
		if a.PerSecond > b.PerSecond {
			return -1
		}
		if a.PerSecond < b.PerSecond {
			return 1
		}
		return strings.Compare(a.Verb+a.Resource, b.Verb+b.Resource)
	})
	for k := range pids {
		s.Cores[k] = u1[k].CoresSince(u0[k])
		s.RSSMiB[k] = u1[k].RSSKiB / 1024
	}
	var parts []string
	for _, r := range s.Rates {
		parts = append(parts, fmt.Sprintf("%s %s=%.2f/s", r.Verb, r.Resource, r.PerSecond))
	}
	t.Logf("FIGURE nodes=%d steady %s: requests by verb and resource: %s (Lease updates expected %.0f/s)", n, window, strings.Join(parts, ", "), s.LeaseWant)
	t.Logf("FIGURE nodes=%d steady %s: cpu (cores) %s; rss (MiB) %v; load %v", n, window, fmtCores(s.Cores), s.RSSMiB, s.Load)
	return s
}

// requestCounts sums apiserver_request_total by "VERB resource[/subresource]", leaving out
// the watch verbs' long-running requests and the metrics scrape itself.
func requestCounts(t *testing.T, ctx context.Context, cs *kubernetes.Clientset) map[string]float64 {
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(line, '}')
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			continue
		}
		l := promLabels(line[len("apiserver_request_total{"):i])
		res := l["resource"]
		if res == "" {
			continue // non-resource requests (/metrics, /healthz)
		}
		if l["subresource"] != "" {
			res += "/" + l["subresource"]
		}
		out[l["verb"]+" "+res] += v
	}
	return out
}

func promLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		v, rest, _ := strings.Cut(rest, `"`)
		out[k] = v
		s = strings.TrimPrefix(rest, ",")
	}
	return out
}

// policyChange raises the class's resources and times until every pool's snapshot carries
// them, until every hollow node's node-ctl has applied them, and until every pool's status
// says so (lastAppliedGeneration is the pool's generation).
func policyChange(t *testing.T, ctx context.Context, e *env, nodes *hollow.Nodes, names []string, limit time.Duration) (snap, applied, status time.Duration) {
	c := &v1alpha1.SandboxPoolClass{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}
	patch := []byte(`{"spec":{"resourcePolicy":{"resources":{"cpu":"2","memory":"2Gi"}}}}`)
	start := time.Now()
	if err := e.admin.Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	watched := map[string]bool{}
	for _, node := range names {
		watched[node] = true
	}
	snap, applied, status = limit, limit, limit
	// A figure not reached within limit stays limit: the poll's timeout is not a failure.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, limit-time.Since(start), true, func(ctx context.Context) (bool, error) {
		var pools v1alpha1.SandboxPoolList
		if err := e.admin.List(ctx, &pools); err != nil {
			return false, err
		}
		snaps, stats := 0, 0
		for _, p := range pools.Items {
			if !watched[p.Spec.NodeName] {
				continue
			}
			if p.Spec.ResourcePolicy.Resources.Memory().String() == "2Gi" {
				snaps++
				if p.Status.LastAppliedGeneration != nil && *p.Status.LastAppliedGeneration == p.Generation &&
					meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionResourceSynced.String()) {
					stats++
				}
			}
		}
		done := 0
		for _, node := range names {
			if _, res := nodes.NodeCtl(node).Applied(); res["memory"] == "2Gi" {
				done++
			}
		}
		now := time.Since(start)
		if snaps == len(names) && snap == limit {
			snap = now
		}
		if done == len(names) && applied == limit {
			applied = now
		}
		if stats == len(names) && status == limit {
			status = now
		}
		return status < limit && applied < limit && snap < limit, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
	if status == limit {
		var pools v1alpha1.SandboxPoolList
		_ = e.admin.List(ctx, &pools)
		for _, p := range pools.Items {
			if watched[p.Spec.NodeName] && p.Status.LastAppliedGeneration == nil || *p.Status.LastAppliedGeneration != p.Generation ||
				!meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionResourceSynced.String()) && watched[p.Spec.NodeName] {
				t.Logf("not synced: %s generation %d status %+v", p.Name, p.Generation, p.Status)
				break
			}
		}
	}
	t.Logf("FIGURE policy change at %d nodes with running agents: all snapshots %s, all node-ctls applied %s, all statuses synced %s",
		len(names), snap.Round(time.Millisecond), applied.Round(time.Millisecond), status.Round(time.Millisecond))
	return snap, applied, status
}

// detectStopped stops the agents of nodes and times, per pool, until its
// PlaceholderAgentHealthy is False: from the stop, and past the Lease's expiry (last renewal
// + TTL).
func detectStopped(t *testing.T, ctx context.Context, e *env, nodes *hollow.Nodes, stopped []string, limit time.Duration) (p50, p99, past50, past99 time.Duration) {
	stoppedAt := map[string]time.Time{}
	for _, node := range stopped {
		nodes.StopAgent(node)
		stoppedAt[naming.PoolName(node)] = time.Now()
	}
	expiry := map[string]time.Time{}
	for pool := range stoppedAt {
		var l coordinationv1.Lease
		if err := e.admin.Get(ctx, types.NamespacedName{Namespace: v1alpha1.DefaultLeaseNamespace, Name: pool}, &l); err == nil && l.Spec.RenewTime != nil {
			expiry[pool] = l.Spec.RenewTime.Add(leaseTTL)
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := watchAll(t, wctx, e.admin, func() client.ObjectList { return &v1alpha1.SandboxPoolList{} })
	var fromStop, pastTTL []time.Duration
	got := map[string]bool{}
	deadline := time.After(limit + leaseTTL)
	for len(got) < len(stoppedAt) {
		select {
		case o := <-events:
			p := o.(*v1alpha1.SandboxPool)
			if got[p.Name] || stoppedAt[p.Name].IsZero() {
				continue
			}
			if meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) {
				got[p.Name] = true
				now := time.Now()
				fromStop = append(fromStop, now.Sub(stoppedAt[p.Name]))
				if x, ok := expiry[p.Name]; ok {
					pastTTL = append(pastTTL, now.Sub(x))
				}
			}
		case <-deadline:
			t.Logf("FIGURE nodes=? detection: only %d of %d stopped agents detected", len(got), len(stoppedAt))
			return limit, limit, limit, limit
		}
	}
	p50, p99 = pct(fromStop, 50), pct(fromStop, 99)
	past50, past99 = pct(pastTTL, 50), pct(pastTTL, 99)
	t.Logf("FIGURE detection: %d agents stopped -> PlaceholderAgentHealthy=False p50=%s p99=%s after the stop (TTL %s, renew %s); past the Lease's expiry p50=%s p99=%s",
		len(stopped), p50, p99, leaseTTL, renewInterval, past50, past99)
	return p50, p99, past50, past99
}

// detectDeleted deletes nodes and times, per pool, until NodeNotFound is True.
func detectDeleted(t *testing.T, ctx context.Context, e *env, deleted []string, limit time.Duration) (p50, p99 time.Duration) {
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events := watchAll(t, wctx, e.admin, func() client.ObjectList { return &v1alpha1.SandboxPoolList{} })
	at := map[string]time.Time{}
	var mu sync.Mutex
	go func() {
		for _, node := range deleted {
			now := time.Now()
			if err := e.admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
				t.Errorf("deleting node %s: %v", node, err)
			}
			mu.Lock()
			at[naming.PoolName(node)] = now
			mu.Unlock()
		}
	}()
	var lags []time.Duration
	got := map[string]bool{}
	deadline := time.After(limit)
	for len(got) < len(deleted) {
		select {
		case o := <-events:
			p := o.(*v1alpha1.SandboxPool)
			if got[p.Name] {
				continue
			}
			mu.Lock()
			when, known := at[p.Name]
			mu.Unlock()
			if known && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionNodeNotFound.String()) {
				got[p.Name] = true
				lags = append(lags, time.Since(when))
			}
		case <-deadline:
			t.Logf("FIGURE detection: only %d of %d deleted nodes seen", len(got), len(deleted))
			return limit, limit
		}
	}
	p50, p99 = pct(lags, 50), pct(lags, 99)
	t.Logf("FIGURE detection: %d nodes deleted -> NodeNotFound=True p50=%s p99=%s", len(deleted), p50, p99)
	return p50, p99
}

// watchAll sends every object of the list kind as listed and then as watched, and lists
// and watches again whenever the watch ends (the API server closes long watches; a closed
// watch must not end a measurement). Deletions are not sent.
func watchAll(t *testing.T, ctx context.Context, c client.WithWatch, newList func() client.ObjectList, opts ...client.ListOption) <-chan client.Object {
	out := make(chan client.Object, 1024)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			l := newList()
			if err := c.List(ctx, l, opts...); err != nil {
				time.Sleep(time.Second) // retry interval after a failed list
				continue
			}
			_ = meta.EachListItem(l, func(o runtime.Object) error {
				select {
				case out <- o.(client.Object):
				case <-ctx.Done():
				}
				return nil
			})
			lm, _ := meta.ListAccessor(l)
			w, err := c.Watch(ctx, newList(), append(slices.Clone(opts), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()}})...)
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified:
					select {
					case out <- ev.Object.(client.Object):
					case <-ctx.Done():
					}
				case watch.Error:
					if ctx.Err() == nil {
						t.Logf("watch error (listing again): %v", ev.Object)
					}
				}
			}
			w.Stop()
		}
	}()
	return out
}

// debugTimeline logs, for a few pools, when each step of their way to Ready happened.
func debugTimeline(t *testing.T, ctx context.Context, e *env, names []string) {
	for _, i := range []int{0, len(names) / 4, len(names) / 2, len(names) - 1} {
		var p v1alpha1.SandboxPool
		if err := e.admin.Get(ctx, types.NamespacedName{Name: naming.PoolName(names[i])}, &p); err != nil {
			continue
		}
		c0 := p.CreationTimestamp.Time
		line := fmt.Sprintf("%s created %s", p.Name, c0.Format("15:04:05.000"))
		var l coordinationv1.Lease
		if err := e.admin.Get(ctx, types.NamespacedName{Namespace: v1alpha1.DefaultLeaseNamespace, Name: p.Name}, &l); err == nil && l.Spec.AcquireTime != nil {
			line += fmt.Sprintf(" lease+%s", l.Spec.AcquireTime.Sub(c0).Round(time.Millisecond))
		}
		var pods corev1.PodList
		_ = e.admin.List(ctx, &pods, client.InNamespace(v1alpha1.DefaultPodNamespace), client.MatchingLabels{v1alpha1.LabelPoolName: p.Name})
		for _, pod := range pods.Items {
			line += fmt.Sprintf(" mirror+%s", pod.CreationTimestamp.Sub(c0).Round(time.Second))
		}
		for _, c := range p.Status.Conditions {
			line += fmt.Sprintf(" %s=%s+%s", c.Type, c.Status, c.LastTransitionTime.Sub(c0).Round(time.Second))
		}
		for _, m := range p.ManagedFields {
			line += fmt.Sprintf(" [%s %s %s+%s]", m.Manager, m.Operation, m.Subresource, m.Time.Sub(c0).Round(time.Second))
		}
		t.Logf("timeline %s", line)
	}
}

// notRunSizes reports the sizes of SANDBOXPOOL_HOLLOW_NOT_RUN, with what the largest size
// run suggests they would take (the fan-out to Ready scaled linearly: a lower bound, the API
// server being the bound at every size measured).
func notRunSizes(t *testing.T, rs []*scaleResult) []string {
	var out []string
	s := os.Getenv(hollowNotRunEnv)
	if s == "" || len(rs) == 0 {
		return nil
	}
	last := rs[len(rs)-1]
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%s: %q is not a number", hollowNotRunEnv, f)
		}
		est := time.Duration(float64(last.Ready) * float64(n) / float64(last.N)).Round(time.Second)
		line := fmt.Sprintf("N=%d not run: at N=%d the fan-out to Ready took %s, so N=%d needs at least ~%s for it alone "+
			"(and as long again for the policy change), beyond this run's 30-minute budget on this machine", n, last.N,
			last.Ready.Round(time.Second), n, est)
		t.Logf("FIGURE %s", line)
		out = append(out, line)
	}
	return out
}
