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

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/hollow"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// Settings of the hollow-node scale run (make bench-scale), from the environment.
const (
	hollowNodesEnv  = "SANDBOXPOOL_HOLLOW_NODES"  // how many hollow nodes, default 5000
	hollowSteadyEnv = "SANDBOXPOOL_HOLLOW_STEADY" // each side's steady-state window, default 1m
	hollowLimitEnv  = "SANDBOXPOOL_HOLLOW_LIMIT"  // per-phase deadline, default 10m
	hollowReportEnv = "SANDBOXPOOL_HOLLOW_REPORT" // where the figures go (docs/benchmarks-log.md section, PNGs), default none
)

const (
	// benchQPS is the client-side limit of the controller and of kube-controller-manager in
	// these runs: high enough that the API server, not the client, bounds both.
	benchQPS, benchBurst = 1000, 2000
	dsNamespace          = "bench-ds"
	renewInterval        = 10 * time.Second // the agents' and the design's default
	leaseTTL             = 40 * time.Second
	// revAnnotation is the DaemonSet template's annotation a template change bumps.
	revAnnotation = "bench.sandboxpool.io/rev"
	// The class's cpu before, during and after the policy change.
	cpuBase, cpuUp = "1", "2"
)

// Sides of the comparison.
const (
	sideDS   = "DaemonSet"
	sidePool = "SandboxPool"
)

// phaseResult is one phase of one side: how long it took, whether its end was reached, what
// it cost the control plane, and over how many nodes.
type phaseResult struct {
	side, name, what string
	nodes            int
	reached          bool
	cost             cost
	// marks are the moments worth reporting inside the phase (all pools exist, …).
	marks []mark
}

// mark is a moment inside a phase: at is how long after the phase began, or 0 when the phase
// ended before it.
type mark struct {
	what string
	at   time.Duration
}

// in is the mark in a sentence, its time written by d.
func (m mark) in(d func(time.Duration) string) string {
	if m.at <= 0 {
		return m.what + " not within the phase"
	}
	return m.what + " after " + d(m.at)
}

// scaleRun is one run of TestHollowScale: every phase of both sides, and how the run went.
type scaleRun struct {
	n, lost    int
	began      time.Time
	load       [3]string
	commit     string
	phases     []*phaseResult
	dsSeries   []readyPoint
	poolSeries []readyPoint
	// dsCreateAt and poolCreateAt are when each side's create began, on its series' clock.
	dsCreateAt, poolCreateAt time.Duration
	steady                   map[string]cost // each side's steady state
	notes                    []string
	wall                     time.Duration
	renew, ttl               time.Duration
	steadyWindow             time.Duration
	hollowWorkers            int
	dsRolloutSurge           string
	// log is where each phase's FIGURE line goes as the phase ends.
	log testing.TB
}

func durationEnv(t testing.TB, name string, def time.Duration) time.Duration {
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

func loadAvg() [3]string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	var out [3]string
	copy(out[:], f)
	return out
}

// TestHollowScale measures what a node costs the control plane, on equal terms with a
// DaemonSet: N hollow nodes (their own process, every node with its own identities), the
// API server's node admission, deploy/'s policies and the webhook, first a DaemonSet under
// kube-controller-manager (create → all pods Ready; steady state; template change → rolled;
// 1 % of the nodes lost → their pods gone; delete → all gone), then a class under the
// SandboxPool controller (create → all pools Ready; steady state; cpu up, then down → all
// applied; 1 % of the nodes lost → detected; delete → all gone). For each phase it reads the
// API server's and etcd's own counters and the processes' CPU, and writes the side-by-side
// table and plots (SANDBOXPOOL_HOLLOW_REPORT). It asserts nothing about time.
func TestHollowScale(t *testing.T) {
	if os.Getenv(BenchEnv) == "" {
		t.Skipf("set %s=1 to run the hollow-node scale comparison (make bench-scale)", BenchEnv)
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	n := 5000
	if s := os.Getenv(hollowNodesEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 100 {
			t.Fatalf("%s=%q: want a number of nodes, at least 100", hollowNodesEnv, s)
		}
	}
	r := &scaleRun{n: n, lost: max(n/100, 1), began: time.Now(), load: loadAvg(), commit: os.Getenv("SANDBOXPOOL_COMMIT"),
		steady: map[string]cost{}, renew: renewInterval, ttl: leaseTTL, steadyWindow: durationEnv(t, hollowSteadyEnv, time.Minute),
		hollowWorkers: 64, dsRolloutSurge: "100%", log: t}
	limit := durationEnv(t, hollowLimitEnv, 10*time.Minute)
	c := newHollowCluster(t, n, clusterOptions{})
	t.Logf("FIGURE setup: %d nodes, identities, webhook in %s", n, time.Since(r.began).Round(time.Second))
	runDaemonSetSide(t, c, r, limit)
	runPoolSide(t, c, r, limit)
	r.wall = time.Since(r.began)
	t.Logf("FIGURE hollow-scale total wall time %s at %d nodes", r.wall.Round(time.Second), n)
	if dir := os.Getenv(hollowReportEnv); dir != "" {
		if err := writeScaleReport(dir, r); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// phaseRunner measures phases against one cluster and observer.
type phaseRunner struct {
	t     testing.TB
	ctx   context.Context
	c     *hollowCluster
	obs   *observer
	limit time.Duration
}

// run acts, then waits (without asking the API server) until done holds or the limit,
// and returns what the phase cost. done returns what it still waits for, "" when done.
func (p *phaseRunner) run(side, name, what string, nodes int, act func(), done func() string) *phaseResult {
	p.t.Helper()
	res := &phaseResult{side: side, name: name, what: what, nodes: nodes}
	own0 := p.obs.own.snapshot()
	before := readCounters(p.t, p.ctx, p.c.cs, p.c.e.cp.Env.ControlPlane.Etcd.URL.String(), p.c.pids)
	act()
	deadline := time.Now().Add(p.limit)
	state := done()
	for state != "" && time.Now().Before(deadline) {
		select {
		case <-p.ctx.Done():
			p.t.Fatal(p.ctx.Err())
		case <-time.After(100 * time.Millisecond): // polls the observer's state, in this process
		}
		state = done()
	}
	res.reached = state == ""
	after := readCounters(p.t, p.ctx, p.c.cs, p.c.e.cp.Env.ControlPlane.Etcd.URL.String(), p.c.pids)
	res.cost = after.since(before, p.obs.own.snapshot().minus(own0))
	if !res.reached {
		p.t.Logf("%s %s: not reached within %s: %s", side, name, p.limit, state)
	}
	return res
}

func runDaemonSetSide(t *testing.T, c *hollowCluster, r *scaleRun, limit time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, lost := r.n, c.names[len(c.names)-r.lost:]
	ctl := c.startHollow(t, "hollow-nodes-ds", hollowOptions{renew: r.renew, ttl: r.ttl, workers: r.hollowWorkers})
	c.startKCM(t)
	c.startScheduler(t)
	obs := newObserver(ctx, t, c.e.admin)
	p := &phaseRunner{t: t, ctx: ctx, c: c, obs: obs, limit: limit}
	ready := func(rev string) func(*corev1.Pod) bool {
		return func(pod *corev1.Pod) bool {
			return pod.DeletionTimestamp == nil && podRunningAndReady(pod) && pod.Annotations[revAnnotation] == rev
		}
	}
	ds := benchDaemonSet(r.dsRolloutSurge)
	r.dsCreateAt = time.Since(obs.start)
	r.add(p.run(sideDS, "create", "create → all pods Ready", n, func() {
		if err := c.e.admin.Create(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		k, all := obs.podsWhere(ready("1"))
		return unless(k == n && all == n, "%d of %d pods Ready (%d pods)", k, n, all)
	}))
	r.addSteady(sideDS, p.timed(sideDS, n, r.steadyWindow))
	r.add(p.run(sideDS, "change", "template change → all pods replaced and Ready", n, func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"2"}}}}}`, revAnnotation)
		if err := c.e.admin.Patch(ctx, ds, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		k, all := obs.podsWhere(ready("2"))
		return unless(k == n && all == n, "%d of %d new pods Ready (%d pods)", k, n, all)
	}))
	onLost := func(pod *corev1.Pod) bool { return slices.Contains(lost, pod.Spec.NodeName) }
	r.add(p.run(sideDS, "loss", fmt.Sprintf("%d nodes lost → their pods gone", len(lost)), len(lost), func() {
		nodesDo(t, ctl, hollow.StopPath, lost)
		c.deleteNodes(t, lost)
	}, func() string {
		k, _ := obs.podsWhere(onLost)
		return unless(k == 0, "%d pods left on the lost nodes", k)
	}))
	r.add(p.run(sideDS, "delete", "delete → all pods gone", n, func() {
		if err := c.e.admin.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		_, all := obs.podsWhere(func(*corev1.Pod) bool { return true })
		return unless(all == 0, "%d pods left", all)
	}))
	r.dsSeries = obs.readySeries()
	c.stop("kube-controller-manager")
	c.stop("kube-scheduler")
	c.stop("hollow-nodes-ds")
	// The lost nodes come back (new Node objects) for the other side.
	c.recreateNodes(t, lost)
}

func runPoolSide(t *testing.T, c *hollowCluster, r *scaleRun, limit time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, lost := r.n, c.names[len(c.names)-r.lost:]
	c.mintLeaseTokens(t)
	ctl := c.startHollow(t, "hollow-nodes-pool", hollowOptions{renew: r.renew, ttl: r.ttl, workers: r.hollowWorkers})
	c.startPoolController(t, r.ttl)
	obs := newObserver(ctx, t, c.e.admin)
	p := &phaseRunner{t: t, ctx: ctx, c: c, obs: obs, limit: limit}
	class := wrappers.MakeClass("scale").Selector("pool", "scale").Resources(cpuBase, "1Gi").Obj()
	isReady := func(pool *v1alpha1.SandboxPool) bool { return pool.Status.Phase == v1alpha1.PhaseReady }
	began := time.Now()
	r.poolCreateAt = time.Since(obs.start)
	var existed time.Duration
	create := p.run(sidePool, "create", "create → all pools Ready", n, func() {
		if err := c.e.admin.Create(ctx, class); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		k, all := obs.poolsWhere(isReady)
		if all == n && existed == 0 {
			existed = time.Since(began)
		}
		return unless(k == n, "%d of %d pools Ready (%d pools)", k, n, all)
	})
	create.marks = append(create.marks, mark{"all pools exist", existed})
	r.add(create)
	r.addSteady(sidePool, p.timed(sidePool, n, r.steadyWindow))
	prev := create
	for _, step := range []struct{ name, cpu string }{{"up", cpuUp}, {"down", cpuBase}} {
		if !prev.reached {
			// A phase that did not end leaves the next with nothing to measure from.
			r.notes = append(r.notes, fmt.Sprintf("%s %s did not end within %s: change-%s left out", prev.side, prev.name, limit, step.name))
			continue
		}
		prev = p.run(sidePool, "change-"+step.name, fmt.Sprintf("class cpu %s → all pools hold it", step.cpu), n, func() {
			patch := fmt.Sprintf(`{"spec":{"resourcePolicy":{"resources":{"cpu":%q}}}}`, step.cpu)
			if err := c.e.admin.Patch(ctx, class, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatal(err)
			}
		}, func() string {
			k, _ := obs.poolsWhere(func(pool *v1alpha1.SandboxPool) bool { return applied(pool, step.cpu) })
			return unless(k == n, "%d of %d pools hold cpu %s", k, n, step.cpu)
		})
		r.add(prev)
	}
	lostPool := map[string]bool{}
	for _, node := range lost {
		lostPool["placeholder-"+node] = true
	}
	var nodeGone, agentGone time.Duration
	began = time.Now()
	loss := p.run(sidePool, "loss", fmt.Sprintf("%d nodes lost → detected", len(lost)), len(lost), func() {
		nodesDo(t, ctl, hollow.StopPath, lost)
		c.deleteNodes(t, lost)
	}, func() string {
		k, _ := obs.poolsWhere(func(pool *v1alpha1.SandboxPool) bool {
			return lostPool[pool.Name] && meta.IsStatusConditionTrue(pool.Status.Conditions, v1alpha1.ConditionNodeNotFound.String())
		})
		a, _ := obs.poolsWhere(func(pool *v1alpha1.SandboxPool) bool {
			return lostPool[pool.Name] && meta.IsStatusConditionFalse(pool.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String())
		})
		if k == len(lost) && nodeGone == 0 {
			nodeGone = time.Since(began)
		}
		if a == len(lost) && agentGone == 0 {
			agentGone = time.Since(began)
		}
		return unless(k == len(lost) && a == len(lost), "NodeNotFound on %d, agent unhealthy on %d of %d pools", k, a, len(lost))
	})
	loss.marks = append(loss.marks, mark{"NodeNotFound on every lost node's pool", nodeGone},
		mark{fmt.Sprintf("PlaceholderAgentHealthy=False on every one (Lease TTL %s)", r.ttl), agentGone})
	r.add(loss)
	r.add(p.run(sidePool, "delete", "delete → all pools gone", n, func() {
		if err := c.e.admin.Delete(ctx, class); err != nil {
			t.Fatal(err)
		}
	}, func() string {
		_, all := obs.poolsWhere(func(*v1alpha1.SandboxPool) bool { return true })
		return unless(all == 0, "%d pools left", all)
	}))
	r.poolSeries = obs.readySeries()
	c.stop("controller")
	c.stop("hollow-nodes-pool")
}

// timed measures a window of d in which nothing is asked.
func (p *phaseRunner) timed(side string, nodes int, d time.Duration) *phaseResult {
	end := time.Now().Add(d)
	res := p.run(side, "steady", fmt.Sprintf("steady state (%s)", d), nodes, func() {}, func() string {
		return unless(!time.Now().Before(end), "window")
	})
	return res
}

// applied reports whether the pool holds cpu: the snapshot asks for it, and the agent says
// the node holds it at the pool's generation, with the pool Ready.
func applied(p *v1alpha1.SandboxPool, cpu string) bool {
	q := p.Spec.ResourcePolicy.Resources[corev1.ResourceCPU]
	return q.String() == cpu && p.Status.Phase == v1alpha1.PhaseReady && p.Status.LastAppliedGeneration != nil &&
		*p.Status.LastAppliedGeneration == p.Generation &&
		meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionResourceSynced.String())
}

// benchDaemonSet is a DaemonSet over the hollow nodes whose template changes roll out with
// surge pods, as a pool's resize adds its new piece before the old goes.
func benchDaemonSet(surge string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "bench-ds"}
	s := intstr.FromString(surge)
	zero := intstr.FromInt32(0)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dsNamespace, Name: "bench"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &s, MaxUnavailable: &zero}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{revAnnotation: "1"}},
				Spec: corev1.PodSpec{
					NodeSelector:                 hollowLabel,
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}},
				},
			},
		},
	}
}

func (r *scaleRun) add(p *phaseResult) {
	r.phases = append(r.phases, p)
	if r.log != nil {
		r.log.Logf("FIGURE %s", p.line(r))
	}
}

func (r *scaleRun) addSteady(side string, p *phaseResult) {
	r.steady[side] = p.cost
	r.add(p)
}

// unless is "" when ok, else the formatted state.
func unless(ok bool, format string, args ...any) string {
	if ok {
		return ""
	}
	return fmt.Sprintf(format, args...)
}

// line is the phase as a FIGURE line.
func (p *phaseResult) line(r *scaleRun) string {
	c := p.cost
	var parts []string
	for _, k := range byCount(c.requests) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, perNode(c.requests[k], p.nodes)))
	}
	var marks []string
	for _, m := range p.marks {
		marks = append(marks, "; "+m.in(func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }))
	}
	return fmt.Sprintf("%s %s (%s): %s%s%s, per node: requests %s (%s), kube-apiserver cpu %.1f ms, etcd WAL %.0f B, watch events %s",
		p.side, p.name, p.what, c.took.Round(100*time.Millisecond), map[bool]string{true: "", false: " (NOT REACHED)"}[p.reached], strings.Join(marks, ""),
		perNode(total(c.requests, nil), p.nodes), strings.Join(parts, " "),
		float64(c.cpu["kube-apiserver"].Microseconds())/1000/float64(p.nodes), c.etcdBytes/float64(p.nodes),
		perNode(total(c.watch, nil), p.nodes))
}
