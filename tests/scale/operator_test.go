// Package scale measures the controller on a real etcd + kube-apiserver at sizes a unit
// test cannot: fan-out time against a plain client-go create loop, the controller's CPU and
// RSS, and the phase lag. It prints figures; it asserts only correctness (every pool
// created), never a timing. Run it with `make bench-operator` (SANDBOXPOOL_BENCH=1).
package scale

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/hollow"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// BenchEnv turns the scale runs on; they take minutes.
const BenchEnv = "SANDBOXPOOL_BENCH"

const (
	controllerUser = "system:serviceaccount:sandbox-pool-system:sandbox-pool-controller"
	// clientQPS is the client-side limit of both the controller and the plain create loop.
	clientQPS, clientBurst = 200, 400
	// loopWorkers is the plain loop's concurrency (the controller's slow start reaches the
	// burst cap, 250, but the shared QPS limit is what bounds both).
	loopWorkers = 64
)

func sizes(t *testing.T) []int {
	s := os.Getenv("SANDBOXPOOL_BENCH_SIZES")
	if s == "" {
		s = "1000,5000"
	}
	return parseSizes(t, s)
}

func TestOperatorScale(t *testing.T) {
	if os.Getenv(BenchEnv) == "" {
		t.Skipf("set %s=1 to run the scale measurements (make bench-operator)", BenchEnv)
	}
	if why := framework.Unavailable(); why != "" {
		t.Fatal(why)
	}
	for _, n := range sizes(t) {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) { measure(t, n) })
	}
}

type env struct {
	cp     *framework.ControlPlane
	admin  client.WithWatch // unthrottled
	scheme *runtime.Scheme
	dir    string
}

func start(t *testing.T) *env {
	cp, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return setUpCluster(t, cp)
}

func nodeName(i int) string { return fmt.Sprintf("scale-node-%05d", i) }

func measure(t *testing.T, n int) {
	e := start(t)
	ctx := context.Background()
	if err := hollow.Parallel(n, 32, func(i int) error {
		return e.admin.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{"pool": "scale"}}})
	}); err != nil {
		t.Fatal(err)
	}

	// 1. The physical limit: a plain create loop of the same objects at the same client QPS.
	loopCfg := rest.CopyConfig(e.cp.Config)
	loopCfg.QPS, loopCfg.Burst = clientQPS, clientBurst
	loop, err := client.New(loopCfg, client.Options{Scheme: e.scheme})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := hollow.Parallel(n, loopWorkers, func(i int) error {
		return loop.Create(ctx, wrappers.MakePool(nodeName(i)).Class("plain").Resources("1", "1Gi").Obj())
	}); err != nil {
		t.Fatal(err)
	}
	plain := time.Since(began)
	if err := e.admin.DeleteAllOf(ctx, &v1alpha1.SandboxPool{}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, e, 0, 2*time.Minute)

	// 2. The controller, as its own process with its own identity and RBAC.
	bin, err := support.BuildBinary(e.cp.Root, e.dir, "./cmd/sandboxpool-controller")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := e.cp.KubeconfigFor(e.dir, controllerUser, "system:serviceaccounts", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	proc := support.StartProcess(t, "controller", bin, "--kubeconfig", kc, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		fmt.Sprintf("--kube-api-qps=%d", clientQPS), fmt.Sprintf("--kube-api-burst=%d", clientBurst))
	// Let it start and sync its caches (N nodes) before the clock starts.
	time.Sleep(5 * time.Second) // start-up, not a synchronisation: the watch below decides
	idleBefore := sample(t, proc.Pid())
	w, err := e.admin.Watch(ctx, &v1alpha1.SandboxPoolList{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := sample(t, proc.Pid())
	class := wrappers.MakeClass("scale").Selector("pool", "scale").Resources("1", "1Gi").Obj()
	began = time.Now()
	if err := e.admin.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(10 * time.Minute)
	for len(seen) < n {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Added {
				seen[ev.Object.(*v1alpha1.SandboxPool).Name] = true
			}
		case <-deadline:
			t.Fatalf("only %d of %d pools after 10 min", len(seen), n)
		}
	}
	fanout := time.Since(began)
	during := sample(t, proc.Pid())

	// Let the pool controller settle (every pool Pending), then measure idle.
	waitSettled(t, e, n)
	settled := sample(t, proc.Pid())
	time.Sleep(30 * time.Second) // the idle period under observation
	idle := sample(t, proc.Pid())

	lags := phaseLag(t, e, 50)

	t.Logf("FIGURE nodes=%d plain-create-loop=%s controller-fanout=%s ratio=%.2f (client QPS %d burst %d)",
		n, plain.Round(time.Millisecond), fanout.Round(time.Millisecond), fanout.Seconds()/plain.Seconds(), clientQPS, clientBurst)
	t.Logf("FIGURE nodes=%d controller idle-before-class rss=%dMiB; during fan-out cpu=%.2f cores rss=%dMiB peak-rss=%dMiB; idle with %d pools cpu=%.3f cores rss=%dMiB",
		n, idleBefore.RSSKiB/1024, during.CoresSince(before), during.RSSKiB/1024, idle.HWMKiB/1024, n, idle.CoresSince(settled), idle.RSSKiB/1024)
	t.Logf("FIGURE nodes=%d phase-lag p50=%s p99=%s max=%s over %d condition changes",
		n, pct(lags, 50), pct(lags, 99), pct(lags, 100), len(lags))
}

func waitCount(t *testing.T, e *env, want int, within time.Duration) {
	t.Helper()
	support.Eventually(t, fmt.Sprintf("pool count reaches %d", want), within, 200*time.Millisecond, func() (bool, string) {
		var l metav1.PartialObjectMetadataList
		l.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("SandboxPoolList"))
		err := e.admin.List(context.Background(), &l)
		return err == nil && len(l.Items) == want, fmt.Sprintf("%d pools (list: %v)", len(l.Items), err)
	})
}

// waitSettled waits until the class counts every pool and no pool lacks a phase.
func waitSettled(t *testing.T, e *env, n int) {
	t.Helper()
	support.Eventually(t, "every pool phased and counted", 5*time.Minute, 500*time.Millisecond, func() (bool, string) {
		var pools v1alpha1.SandboxPoolList
		if err := e.admin.List(context.Background(), &pools); err != nil {
			return false, err.Error()
		}
		phased := 0
		for _, p := range pools.Items {
			if p.Status.Phase != "" {
				phased++
			}
		}
		var c v1alpha1.SandboxPoolClass
		_ = e.admin.Get(context.Background(), types.NamespacedName{Name: "scale"}, &c)
		return phased == n && ptr.Deref(c.Status.TotalSandboxPools, 0) == int32(n) && ptr.Deref(c.Status.NotReadySandboxPools, 0) == int32(n),
			fmt.Sprintf("%d of %d pools have a phase; class %+v", phased, n, c.Status)
	})
}

// phaseLag flips the agent's PlaceholderPodReady condition on k pools (with fresh Leases) and
// measures how long until the controller's phase follows, from a watch.
func phaseLag(t *testing.T, e *env, k int) []time.Duration {
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	var pools []string
	for i := range k {
		node := nodeName(i)
		p := naming.PoolName(node)
		pools = append(pools, p)
		// A Lease valid for the whole measurement (the default TTL is 40 s), held by the
		// pool's node as its agent holds it.
		if err := e.admin.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultLeaseNamespace, Name: p},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, RenewTime: &now}}); err != nil {
			t.Fatal(err)
		}
	}
	var lags []time.Duration
	for round, status := range []string{"True", "False", "True", "False"} {
		want := v1alpha1.PhaseReady
		if status == "False" {
			want = v1alpha1.PhaseUnready
		}
		for _, p := range pools {
			lag := flipAndWait(t, e, p, status, want)
			if round > 0 { // the first round includes the Lease's first reconcile
				lags = append(lags, lag)
			}
		}
	}
	slices.Sort(lags)
	return lags
}

func flipAndWait(t *testing.T, e *env, pool, status string, want v1alpha1.SandboxPoolPhase) time.Duration {
	ctx := context.Background()
	w, err := e.admin.Watch(ctx, &v1alpha1.SandboxPoolList{}, client.MatchingFields{"metadata.name": pool})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cond := func(typ string) map[string]any { return framework.Condition(typ, status, "Bench") }
	ok := func(typ string) map[string]any { return framework.Condition(typ, "True", "Bench") }
	patch := framework.PoolStatus(pool, map[string]any{"conditions": []any{
		cond(v1alpha1.ConditionPlaceholderPodReady.String()), ok(v1alpha1.ConditionNodeCtlHealthy.String()), ok(v1alpha1.ConditionResourceSynced.String())}})
	began := time.Now()
	if err := e.admin.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner(v1alpha1.FieldManagerAgent)); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-w.ResultChan():
			if p, isPool := ev.Object.(*v1alpha1.SandboxPool); isPool && p.Status.Phase == want {
				return time.Since(began)
			}
		case <-timeout:
			t.Fatalf("pool %s did not become %s within a minute", pool, want)
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration { return framework.Percentile(ds, p) }

func sample(t *testing.T, pid int) framework.Usage {
	u, err := framework.ProcUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	return u
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
