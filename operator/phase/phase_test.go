package phase

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// t0 is the fixed "now" of every test: Compute never reads the clock.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ago returns a metav1.Time d before t0.
func ago(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(-d))
	return &t
}

// cond is a condition of the given type and status that turned at t0-10h unless set later.
func cond(typ v1alpha1.ConditionType, status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: typ.String(), Status: status, Reason: "Test", LastTransitionTime: *ago(10 * time.Hour)}
}

// conds is a condition list built from type=status pairs; a missing type is simply absent.
func conds(cs ...metav1.Condition) []metav1.Condition { return cs }

const (
	T = metav1.ConditionTrue
	F = metav1.ConditionFalse
	U = metav1.ConditionUnknown
)

var (
	nodeNotFound = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionNodeNotFound, s) }
	agentHealthy = func(s metav1.ConditionStatus) metav1.Condition {
		return cond(v1alpha1.ConditionPlaceholderAgentHealthy, s)
	}
	podReady       = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionPlaceholderPodReady, s) }
	nodeCtlHealthy = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionNodeCtlHealthy, s) }
	resourceSynced = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionResourceSynced, s) }
	resizeDeferred = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionResizeDeferred, s) }
	resizeInProg   = func(s metav1.ConditionStatus) metav1.Condition { return cond(v1alpha1.ConditionResizeInProgress, s) }
)

// nodeCtlDownAt is NodeCtlHealthy=False whose condition turned False d before t0.
func nodeCtlDownAt(d time.Duration) metav1.Condition {
	c := nodeCtlHealthy(F)
	c.LastTransitionTime = *ago(d)
	return c
}

// healthy is the condition list of a pool with nothing wrong.
func healthy(extra ...metav1.Condition) []metav1.Condition {
	base := conds(nodeNotFound(F), agentHealthy(T), podReady(T), nodeCtlHealthy(T), resourceSynced(T), resizeDeferred(F), resizeInProg(F))
	return withConditions(base, extra...)
}

// withConditions replaces (by type) or adds each of extra in base.
func withConditions(base []metav1.Condition, extra ...metav1.Condition) []metav1.Condition {
	out := append([]metav1.Condition(nil), base...)
next:
	for _, e := range extra {
		for i := range out {
			if out[i].Type == e.Type {
				out[i] = e
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// without removes the conditions of the given types.
func without(base []metav1.Condition, types ...v1alpha1.ConditionType) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range base {
		keep := true
		for _, t := range types {
			keep = keep && c.Type != t.String()
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

type want struct {
	phase     v1alpha1.SandboxPoolPhase
	rule      int
	reason    v1alpha1.PhaseReason
	requeue   time.Duration
	everReady bool
}

var (
	unready  = v1alpha1.PhaseUnready
	pending  = v1alpha1.PhasePending
	degraded = v1alpha1.PhaseDegraded
	ready    = v1alpha1.PhaseReady
)

func TestCompute(t *testing.T) {
	const fiveMin = 5 * time.Minute
	cases := []struct {
		name string
		in   Input
		want want
	}{
		// One case per row.
		{"rule 1 NodeNotFound=True is Unready",
			Input{Conditions: healthy(nodeNotFound(T)), EverReady: true},
			want{unready, 1, v1alpha1.PhaseReasonNodeNotFound, 0, true}},
		{"rule 2 agent unhealthy and pod not ready, never Ready, is Pending",
			Input{Conditions: healthy(agentHealthy(F), podReady(F))},
			want{pending, 2, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 3 agent unhealthy and pod not ready, was Ready, is Unready",
			Input{Conditions: healthy(agentHealthy(F), podReady(F)), EverReady: true},
			want{unready, 3, v1alpha1.PhaseReasonAgentLeaseExpired, 0, true}},
		{"rule 4 agent unhealthy and pod ready is Degraded",
			Input{Conditions: healthy(agentHealthy(F))},
			want{degraded, 4, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 5 pod not ready, never Ready, is Pending",
			Input{Conditions: healthy(podReady(F))},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 6 pod not ready, was Ready, is Unready",
			Input{Conditions: healthy(podReady(F)), EverReady: true},
			want{unready, 6, v1alpha1.PhaseReasonPodNotReady, 0, true}},
		{"rule 7 nodeCtl down 1m is Degraded and requeues at the 5m boundary",
			Input{Conditions: healthy(nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 4 * time.Minute, false}},
		{"rule 8 nodeCtl down 10m is Unready",
			Input{Conditions: healthy(nodeCtlDownAt(10 * time.Minute)), NodeCtlDownSince: ago(10 * time.Minute)},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 9 ResourceSynced=False is Degraded",
			Input{Conditions: healthy(resourceSynced(F))},
			want{degraded, 9, v1alpha1.PhaseReasonResourceNotSynced, 0, false}},
		{"rule 10 all healthy is Ready and sets EverReady",
			Input{Conditions: healthy()},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},

		// Missing and Unknown conditions.
		{"rule 5 missing: a brand-new pool with no conditions is Pending, not Ready",
			Input{},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 5 missing PlaceholderPodReady means pod not ready",
			Input{Conditions: without(healthy(), v1alpha1.ConditionPlaceholderPodReady)},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 5 Unknown PlaceholderPodReady means pod not ready",
			Input{Conditions: healthy(podReady(U))},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 6 missing PlaceholderPodReady after Ready is Unready",
			Input{Conditions: without(healthy(), v1alpha1.ConditionPlaceholderPodReady), EverReady: true},
			want{unready, 6, v1alpha1.PhaseReasonPodNotReady, 0, true}},
		{"rule 2 agent unhealthy and PlaceholderPodReady missing is Pending",
			Input{Conditions: without(healthy(agentHealthy(F)), v1alpha1.ConditionPlaceholderPodReady)},
			want{pending, 2, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 3 agent unhealthy and PlaceholderPodReady Unknown after Ready is Unready",
			Input{Conditions: healthy(agentHealthy(F), podReady(U)), EverReady: true},
			want{unready, 3, v1alpha1.PhaseReasonAgentLeaseExpired, 0, true}},
		{"rule 10 missing PlaceholderAgentHealthy (no lease info yet) does not demote",
			Input{Conditions: without(healthy(), v1alpha1.ConditionPlaceholderAgentHealthy)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 Unknown PlaceholderAgentHealthy does not demote",
			Input{Conditions: healthy(agentHealthy(U))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 5 Unknown PlaceholderAgentHealthy with pod not ready is not rule 2",
			Input{Conditions: healthy(agentHealthy(U), podReady(F))},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 10 missing NodeNotFound does not demote",
			Input{Conditions: without(healthy(), v1alpha1.ConditionNodeNotFound)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 Unknown NodeNotFound does not demote",
			Input{Conditions: healthy(nodeNotFound(U))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 missing NodeCtlHealthy does not demote",
			Input{Conditions: without(healthy(), v1alpha1.ConditionNodeCtlHealthy)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 Unknown NodeCtlHealthy does not demote even with an old downSince",
			Input{Conditions: healthy(nodeCtlHealthy(U)), NodeCtlDownSince: ago(time.Hour)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 NodeCtlHealthy=True ignores a stale downSince",
			Input{Conditions: healthy(), NodeCtlDownSince: ago(time.Hour)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 missing ResourceSynced does not demote",
			Input{Conditions: without(healthy(), v1alpha1.ConditionResourceSynced)},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 Unknown ResourceSynced does not demote",
			Input{Conditions: healthy(resourceSynced(U))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 9 ResourceSynced=False with ResizeDeferred Unknown is Degraded",
			Input{Conditions: healthy(resourceSynced(F), resizeDeferred(U))},
			want{degraded, 9, v1alpha1.PhaseReasonResourceNotSynced, 0, false}},
		{"rule 9 ResourceSynced=False with ResizeDeferred missing is Degraded",
			Input{Conditions: without(healthy(resourceSynced(F)), v1alpha1.ConditionResizeDeferred)},
			want{degraded, 9, v1alpha1.PhaseReasonResourceNotSynced, 0, false}},
		{"rule 10 ResizeInProgress=True alone keeps Ready",
			Input{Conditions: healthy(resizeInProg(T))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 10 not rule 9: ResourceSynced=False during a resize in progress keeps Ready",
			Input{Conditions: healthy(resourceSynced(F), resizeInProg(T))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 9 ResourceSynced=False with ResizeInProgress=False (a fault) is Degraded",
			Input{Conditions: healthy(resourceSynced(F), resizeInProg(F))},
			want{degraded, 9, v1alpha1.PhaseReasonResourceNotSynced, 0, false}},

		// Priority clashes: the earlier row wins.
		{"rule 1 beats rule 4: NodeNotFound=True and agent unhealthy",
			Input{Conditions: healthy(nodeNotFound(T), agentHealthy(F))},
			want{unready, 1, v1alpha1.PhaseReasonNodeNotFound, 0, false}},
		{"rule 1 beats rule 2: NodeNotFound=True is Unready even if never Ready",
			Input{Conditions: healthy(nodeNotFound(T), agentHealthy(F), podReady(F))},
			want{unready, 1, v1alpha1.PhaseReasonNodeNotFound, 0, false}},
		{"rule 1 beats rule 5: NodeNotFound=True with pod not ready",
			Input{Conditions: healthy(nodeNotFound(T), podReady(F))},
			want{unready, 1, v1alpha1.PhaseReasonNodeNotFound, 0, false}},
		{"rule 1 beats rule 7: NodeNotFound=True with nodeCtl down 1m, no requeue",
			Input{Conditions: healthy(nodeNotFound(T), nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute)},
			want{unready, 1, v1alpha1.PhaseReasonNodeNotFound, 0, false}},
		{"rule 2 beats rule 7: agent unhealthy, pod not ready, never Ready, nodeCtl down",
			Input{Conditions: healthy(agentHealthy(F), podReady(F), nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute)},
			want{pending, 2, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 3 beats rule 8: agent unhealthy, pod not ready, was Ready, nodeCtl down long",
			Input{Conditions: healthy(agentHealthy(F), podReady(F), nodeCtlDownAt(time.Hour)), NodeCtlDownSince: ago(time.Hour), EverReady: true},
			want{unready, 3, v1alpha1.PhaseReasonAgentLeaseExpired, 0, true}},
		{"rule 4 beats rule 7: agent unhealthy, pod ready, nodeCtl down 1m, no requeue",
			Input{Conditions: healthy(agentHealthy(F), nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute)},
			want{degraded, 4, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 4 beats rule 8: agent unhealthy, pod ready, nodeCtl down long stays Degraded",
			Input{Conditions: healthy(agentHealthy(F), nodeCtlDownAt(time.Hour)), NodeCtlDownSince: ago(time.Hour), EverReady: true},
			want{degraded, 4, v1alpha1.PhaseReasonAgentLeaseExpired, 0, true}},
		{"rule 4 beats rule 9: agent unhealthy and ResourceSynced=False",
			Input{Conditions: healthy(agentHealthy(F), resourceSynced(F))},
			want{degraded, 4, v1alpha1.PhaseReasonAgentLeaseExpired, 0, false}},
		{"rule 5 beats rule 7: pod not ready, never Ready, nodeCtl down",
			Input{Conditions: healthy(podReady(F), nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute)},
			want{pending, 5, v1alpha1.PhaseReasonNeverReady, 0, false}},
		{"rule 6 beats rule 7: pod not ready, was Ready, nodeCtl down 1m",
			Input{Conditions: healthy(podReady(F), nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute), EverReady: true},
			want{unready, 6, v1alpha1.PhaseReasonPodNotReady, 0, true}},
		{"rule 6 beats rule 9: pod not ready, was Ready, ResourceSynced=False",
			Input{Conditions: healthy(podReady(F), resourceSynced(F)), EverReady: true},
			want{unready, 6, v1alpha1.PhaseReasonPodNotReady, 0, true}},
		{"rule 7 beats rule 9: nodeCtl down 1m and ResourceSynced=False",
			Input{Conditions: healthy(nodeCtlDownAt(time.Minute), resourceSynced(F)), NodeCtlDownSince: ago(time.Minute)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 4 * time.Minute, false}},
		{"rule 8 beats rule 9: nodeCtl down 10m and ResourceSynced=False",
			Input{Conditions: healthy(nodeCtlDownAt(10*time.Minute), resourceSynced(F)), NodeCtlDownSince: ago(10 * time.Minute)},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 10 not rule 9: ResourceSynced=False with ResizeDeferred=True (deferred downscale) keeps Ready",
			Input{Conditions: healthy(resourceSynced(F), resizeDeferred(T))},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
		{"rule 7 not rule 10: ResizeDeferred=True does not excuse nodeCtl down",
			Input{Conditions: healthy(nodeCtlDownAt(time.Minute), resourceSynced(F), resizeDeferred(T)), NodeCtlDownSince: ago(time.Minute)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 4 * time.Minute, false}},

		// The 5-minute boundary, on an injected Now.
		{"rule 7 at 4m59.999s is Degraded and requeues in 1ms",
			Input{Conditions: healthy(nodeCtlDownAt(fiveMin - time.Millisecond)), NodeCtlDownSince: ago(fiveMin - time.Millisecond)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, time.Millisecond, false}},
		{"rule 8 at exactly 5m is Unready with no requeue",
			Input{Conditions: healthy(nodeCtlDownAt(fiveMin)), NodeCtlDownSince: ago(fiveMin)},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 8 at 5m0.001s is Unready",
			Input{Conditions: healthy(nodeCtlDownAt(fiveMin + time.Millisecond)), NodeCtlDownSince: ago(fiveMin + time.Millisecond)},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 7 just gone down is Degraded and requeues in 5m",
			Input{Conditions: healthy(nodeCtlDownAt(0)), NodeCtlDownSince: ago(0)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, fiveMin, false}},
		{"rule 7 downSince wins over the condition's LastTransitionTime",
			Input{Conditions: healthy(nodeCtlDownAt(time.Hour)), NodeCtlDownSince: ago(time.Minute)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 4 * time.Minute, false}},
		{"rule 7 fallback: nil downSince counts from LastTransitionTime 2m ago",
			Input{Conditions: healthy(nodeCtlDownAt(2 * time.Minute))},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 3 * time.Minute, false}},
		{"rule 8 fallback: nil downSince counts from LastTransitionTime 6m ago",
			Input{Conditions: healthy(nodeCtlDownAt(6 * time.Minute))},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 7 fallback: zero downSince counts from LastTransitionTime",
			Input{Conditions: healthy(nodeCtlDownAt(2 * time.Minute)), NodeCtlDownSince: &metav1.Time{}},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 3 * time.Minute, false}},
		{"rule 8 no start known: nil downSince and zero LastTransitionTime get no grace",
			Input{Conditions: healthy(metav1.Condition{Type: v1alpha1.ConditionNodeCtlHealthy.String(), Status: F})},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 7 custom NodeCtlUnreadyAfter 30s, down 20s, requeues in 10s",
			Input{Conditions: healthy(nodeCtlDownAt(20 * time.Second)), NodeCtlDownSince: ago(20 * time.Second), NodeCtlUnreadyAfter: 30 * time.Second},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 10 * time.Second, false}},
		{"rule 8 custom NodeCtlUnreadyAfter 30s, down exactly 30s",
			Input{Conditions: healthy(nodeCtlDownAt(30 * time.Second)), NodeCtlDownSince: ago(30 * time.Second), NodeCtlUnreadyAfter: 30 * time.Second},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},
		{"rule 7 negative NodeCtlUnreadyAfter means the 5m default",
			Input{Conditions: healthy(nodeCtlDownAt(4 * time.Minute)), NodeCtlDownSince: ago(4 * time.Minute), NodeCtlUnreadyAfter: -time.Second},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, time.Minute, false}},
		{"rule 7 downSince 1m in the future (clock skew) is Degraded and requeues in 6m",
			Input{Conditions: healthy(nodeCtlDownAt(-time.Minute)), NodeCtlDownSince: ago(-time.Minute)},
			want{degraded, 7, v1alpha1.PhaseReasonNodeCtlDown, 6 * time.Minute, false}},
		{"rule 8 downSince at the zero time does not overflow",
			Input{Conditions: healthy(nodeCtlHealthy(F)), NodeCtlDownSince: &metav1.Time{Time: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}},
			want{unready, 8, v1alpha1.PhaseReasonNodeCtlDownTooLong, 0, false}},

		// Sticky EverReady passes through every phase.
		{"rule 9 keeps an incoming EverReady",
			Input{Conditions: healthy(resourceSynced(F)), EverReady: true},
			want{degraded, 9, v1alpha1.PhaseReasonResourceNotSynced, 0, true}},
		{"rule 10 with EverReady already set stays true",
			Input{Conditions: healthy(), EverReady: true},
			want{ready, 10, v1alpha1.PhaseReasonAllHealthy, 0, true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Now = t0
			if in.NodeCtlUnreadyAfter == 0 {
				in.NodeCtlUnreadyAfter = fiveMin // the controller's flag default
			}
			got := Compute(in)
			w := Result{Phase: tc.want.phase, Rule: tc.want.rule, Reason: tc.want.reason, RequeueAfter: tc.want.requeue, EverReady: tc.want.everReady}
			if got != w {
				t.Errorf("Compute() = %+v, want %+v", got, w)
			}
		})
	}
}

func TestZeroNodeCtlUnreadyAfterMeansDefault(t *testing.T) {
	in := Input{Conditions: healthy(nodeCtlDownAt(4 * time.Minute)), NodeCtlDownSince: ago(4 * time.Minute), Now: t0}
	got := Compute(in)
	if got.Rule != RuleNodeCtlDown || got.RequeueAfter != DefaultNodeCtlUnreadyAfter-4*time.Minute {
		t.Fatalf("rule 7 with zero NodeCtlUnreadyAfter: got %+v, want rule 7 requeueing in 1m", got)
	}
}

// TestStickyEverReady walks one pool through its life, feeding each EverReady back in as
// the controller does: a pool that was Ready and loses its pod is Unready, not Pending.
func TestStickyEverReady(t *testing.T) {
	steps := []struct {
		name       string
		conditions []metav1.Condition
		phase      v1alpha1.SandboxPoolPhase
		everReady  bool
	}{
		{"created, no conditions: Pending", nil, pending, false},
		{"pod not ready yet: still Pending", healthy(podReady(F)), pending, false},
		{"pod ready: Ready, EverReady set", healthy(), ready, true},
		{"pod not ready again: Unready, not Pending", healthy(podReady(F)), unready, true},
		{"agent lease expired too: Unready, not Pending", healthy(podReady(F), agentHealthy(F)), unready, true},
		{"conditions wiped: Unready, EverReady kept", nil, unready, true},
		{"recovered: Ready", healthy(), ready, true},
	}
	everReady := false
	for _, s := range steps {
		got := Compute(Input{Conditions: s.conditions, EverReady: everReady, Now: t0, NodeCtlUnreadyAfter: DefaultNodeCtlUnreadyAfter})
		if got.Phase != s.phase || got.EverReady != s.everReady {
			t.Fatalf("%s: got phase %s everReady %v (rule %d), want %s %v", s.name, got.Phase, got.EverReady, got.Rule, s.phase, s.everReady)
		}
		everReady = got.EverReady
	}
}

// TestRequeueLandsOnTheBoundary checks that recomputing at Now+RequeueAfter, with no other
// change, flips Degraded to Unready: the boundary needs no new event.
func TestRequeueLandsOnTheBoundary(t *testing.T) {
	for _, down := range []time.Duration{0, time.Nanosecond, time.Second, 4*time.Minute + 59*time.Second + 999*time.Millisecond} {
		t.Run(fmt.Sprintf("rule 7 then rule 8 after %v down", down), func(t *testing.T) {
			in := Input{Conditions: healthy(nodeCtlDownAt(down)), NodeCtlDownSince: ago(down), Now: t0, NodeCtlUnreadyAfter: DefaultNodeCtlUnreadyAfter}
			first := Compute(in)
			if first.Rule != RuleNodeCtlDown || first.RequeueAfter <= 0 {
				t.Fatalf("first pass: got %+v, want rule 7 with a requeue", first)
			}
			in.Now = in.Now.Add(first.RequeueAfter - time.Nanosecond)
			if r := Compute(in); r.Rule != RuleNodeCtlDown || r.RequeueAfter != time.Nanosecond {
				t.Fatalf("1ns before the boundary: got %+v, want rule 7 requeueing in 1ns", r)
			}
			in.Now = in.Now.Add(time.Nanosecond)
			if r := Compute(in); r.Rule != RuleNodeCtlDownTooLong || r.Phase != unready || r.RequeueAfter != 0 {
				t.Fatalf("at the boundary: got %+v, want rule 8 Unready, no requeue", r)
			}
		})
	}
}

// conditionState is one of the four ways a condition can appear: True, False, Unknown or
// missing ("").
var conditionStates = []metav1.ConditionStatus{T, F, U, ""}

// TestComputeInvariants checks invariants over every combination of the states of the six
// conditions the table reads × EverReady × when node-ctl went down.
func TestComputeInvariants(t *testing.T) {
	types := []v1alpha1.ConditionType{
		v1alpha1.ConditionNodeNotFound,
		v1alpha1.ConditionPlaceholderAgentHealthy,
		v1alpha1.ConditionPlaceholderPodReady,
		v1alpha1.ConditionNodeCtlHealthy,
		v1alpha1.ConditionResourceSynced,
		v1alpha1.ConditionResizeDeferred,
	}
	const after = DefaultNodeCtlUnreadyAfter
	downs := []struct {
		name  string
		since *metav1.Time // status.nodeCtl.downSince
		ltt   time.Duration
	}{
		{"down below the boundary", ago(after - time.Millisecond), time.Hour},
		{"down exactly at the boundary", ago(after), time.Hour},
		{"down above the boundary", ago(after + time.Hour), time.Hour},
		{"downSince nil, condition below the boundary", nil, time.Minute},
		{"downSince nil, condition above the boundary", nil, time.Hour},
	}

	n := 0
	states := make([]metav1.ConditionStatus, len(types))
	var walk func(i int)
	walk = func(i int) {
		if i < len(types) {
			for _, s := range conditionStates {
				states[i] = s
				walk(i + 1)
			}
			return
		}
		for _, everReady := range []bool{false, true} {
			for _, down := range downs {
				var cs []metav1.Condition
				for j, s := range states {
					if s != "" {
						c := cond(types[j], s)
						c.LastTransitionTime = *ago(down.ltt)
						cs = append(cs, c)
					}
				}
				snapshot := append([]metav1.Condition(nil), cs...)
				in := Input{Conditions: cs, NodeCtlDownSince: down.since, EverReady: everReady, Now: t0, NodeCtlUnreadyAfter: after}
				got := Compute(in)
				n++
				checkInvariants(t, fmt.Sprintf("%v everReady=%v %s", states, everReady, down.name), in, got)
				if !reflect.DeepEqual(cs, snapshot) {
					t.Fatalf("Compute changed its input conditions")
				}
				if again := Compute(in); again != got {
					t.Fatalf("Compute is not deterministic: %+v then %+v", got, again)
				}
			}
		}
	}
	walk(0)
	if want := 4096 * 2 * len(downs); n != want {
		t.Fatalf("checked %d combinations, want %d", n, want)
	}
}

func checkInvariants(t *testing.T, name string, in Input, got Result) {
	t.Helper()
	status := func(typ v1alpha1.ConditionType) metav1.ConditionStatus {
		for _, c := range in.Conditions {
			if c.Type == typ.String() {
				return c.Status
			}
		}
		return ""
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s: got %+v: "+format, append([]any{name, got}, args...)...)
	}
	switch got.Phase {
	case pending, ready, degraded, unready:
	default:
		fail("phase is not one of the four")
	}
	if got.Rule < RuleNodeNotFound || got.Rule > RuleAllHealthy {
		fail("rule out of 1..10")
	}
	if o := outcomes[got.Rule]; got.Phase != o.phase || got.Reason != o.reason {
		fail("phase/reason do not belong to rule %d", got.Rule)
	}
	if status(v1alpha1.ConditionNodeNotFound) == T && (got.Phase != unready || got.Rule != RuleNodeNotFound) {
		fail("NodeNotFound=True must give rule 1, Unready")
	}
	if (got.RequeueAfter > 0) != (got.Rule == RuleNodeCtlDown) {
		fail("RequeueAfter > 0 exactly for rule 7")
	}
	if got.RequeueAfter < 0 {
		fail("negative RequeueAfter")
	}
	if got.Phase == ready && status(v1alpha1.ConditionPlaceholderPodReady) != T {
		fail("Ready without PlaceholderPodReady=True")
	}
	if got.Phase == pending && in.EverReady {
		fail("Pending after the pool was Ready")
	}
	if got.EverReady != (in.EverReady || got.Phase == ready) {
		fail("EverReady must be input EverReady or Phase Ready")
	}
	if got.Phase == ready && (status(v1alpha1.ConditionPlaceholderAgentHealthy) == F || status(v1alpha1.ConditionNodeCtlHealthy) == F) {
		fail("Ready with the agent or node-ctl explicitly unhealthy")
	}
}

// BenchmarkCompute measures one phase computation on a full condition list: all healthy,
// and node-ctl down (the path that reads times).
func BenchmarkCompute(b *testing.B) {
	for _, bc := range []struct {
		name string
		in   Input
	}{
		{"healthy", Input{Conditions: healthy(), EverReady: true, Now: t0, NodeCtlUnreadyAfter: DefaultNodeCtlUnreadyAfter}},
		{"nodeCtlDown", Input{Conditions: healthy(nodeCtlDownAt(time.Minute)), NodeCtlDownSince: ago(time.Minute), EverReady: true, Now: t0, NodeCtlUnreadyAfter: DefaultNodeCtlUnreadyAfter}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Compute(bc.in)
			}
		})
	}
}
