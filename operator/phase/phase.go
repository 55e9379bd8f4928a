// Package phase computes the aggregated phase of a SandboxPool from its status conditions
// (docs/design.md §3.4). Compute is a pure function: no I/O and no clock reads; the caller passes the
// current time in, and gets back how long until the phase would change with time alone, so
// the controller can requeue exactly at the NodeCtl 5-minute boundary.
//
// # The table, first match wins
//
//  1. NodeNotFound=True                                         → Unready
//  2. PlaceholderAgentHealthy=False, pod not ready, never Ready → Pending
//  3. PlaceholderAgentHealthy=False, pod not ready, was Ready   → Unready
//  4. PlaceholderAgentHealthy=False, pod ready                  → Degraded
//  5. pod not ready, never Ready                                → Pending
//  6. pod not ready, was Ready                                  → Unready
//  7. NodeCtlHealthy=False for less than NodeCtlUnreadyAfter    → Degraded
//  8. NodeCtlHealthy=False for NodeCtlUnreadyAfter or longer    → Unready
//  9. ResourceSynced=False, neither ResizeInProgress=True nor
//     ResizeDeferred=True                                       → Degraded
//  10. otherwise                                                → Ready
//
// "Pod ready" means PlaceholderPodReady=True.
//
// # Missing and Unknown conditions
//
// PlaceholderPodReady is read pessimistically: the pod counts as ready only when it is True.
// False, Unknown and a missing condition all mean "pod not ready" (rules 2, 3, 5 and 6), so
// a brand-new pool with no conditions is Pending (rule 5), never Ready.
//
// Every other condition demotes only on its explicit bad status: NodeNotFound only when True,
// PlaceholderAgentHealthy, NodeCtlHealthy and ResourceSynced only when False. Missing or
// Unknown means "no information yet" and does not by itself demote the pool (for example,
// no lease observed yet is not an expired lease). ResizeInProgress and ResizeDeferred excuse
// ResourceSynced=False only when True: the agent sets ResizeInProgress=True while a resize
// moves without a fault (the pool's old lock holds meanwhile, so the pool stays Ready), and
// ResizeDeferred=True while one waits (for room, for kubelet, for usage to fall); a fault
// (node-ctl refusing the config, for one) sets neither, and the pool is Degraded.
//
// # How long node-ctl has been down
//
// NodeCtlHealthy=False counts from Input.NodeCtlDownSince (status.nodeCtl.downSince). When
// that is nil, it counts from the NodeCtlHealthy condition's LastTransitionTime instead (the
// moment the condition turned False). When neither is set (the API server requires
// lastTransitionTime, so only a hand-built input gets here) the outage has no known start
// and gets no grace period: rule 8, Unready.
package phase

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// DefaultNodeCtlUnreadyAfter is how long node-ctl may be down before a Degraded pool becomes
// Unready (the 5-minute rule). Compute uses it when Input.NodeCtlUnreadyAfter is not positive.
const DefaultNodeCtlUnreadyAfter = 5 * time.Minute

// Rule numbers, the rows of the table in the package documentation.
const (
	RuleNodeNotFound             = 1
	RuleAgentUnhealthyNeverReady = 2
	RuleAgentUnhealthyWasReady   = 3
	RuleAgentUnhealthyPodReady   = 4
	RulePodNotReadyNeverReady    = 5
	RulePodNotReadyWasReady      = 6
	RuleNodeCtlDown              = 7
	RuleNodeCtlDownTooLong       = 8
	RuleResourceNotSynced        = 9
	RuleAllHealthy               = 10
)

// outcomes holds the phase and reason of each rule, indexed by rule number.
var outcomes = [...]struct {
	phase  v1alpha1.SandboxPoolPhase
	reason v1alpha1.PhaseReason
}{
	RuleNodeNotFound:             {v1alpha1.PhaseUnready, v1alpha1.PhaseReasonNodeNotFound},
	RuleAgentUnhealthyNeverReady: {v1alpha1.PhasePending, v1alpha1.PhaseReasonAgentLeaseExpired},
	RuleAgentUnhealthyWasReady:   {v1alpha1.PhaseUnready, v1alpha1.PhaseReasonAgentLeaseExpired},
	RuleAgentUnhealthyPodReady:   {v1alpha1.PhaseDegraded, v1alpha1.PhaseReasonAgentLeaseExpired},
	RulePodNotReadyNeverReady:    {v1alpha1.PhasePending, v1alpha1.PhaseReasonNeverReady},
	RulePodNotReadyWasReady:      {v1alpha1.PhaseUnready, v1alpha1.PhaseReasonPodNotReady},
	RuleNodeCtlDown:              {v1alpha1.PhaseDegraded, v1alpha1.PhaseReasonNodeCtlDown},
	RuleNodeCtlDownTooLong:       {v1alpha1.PhaseUnready, v1alpha1.PhaseReasonNodeCtlDownTooLong},
	RuleResourceNotSynced:        {v1alpha1.PhaseDegraded, v1alpha1.PhaseReasonResourceNotSynced},
	RuleAllHealthy:               {v1alpha1.PhaseReady, v1alpha1.PhaseReasonAllHealthy},
}

// Input is everything the phase depends on.
type Input struct {
	// Conditions are the pool's status conditions, the agent's and the controller's.
	Conditions []metav1.Condition
	// NodeCtlDownSince is status.nodeCtl.downSince; nil falls back to the NodeCtlHealthy
	// condition's LastTransitionTime (see the package documentation).
	NodeCtlDownSince *metav1.Time
	// EverReady is sticky: true once the pool has been Ready, never reset.
	EverReady bool
	// Now is the current time; Compute never reads the clock.
	Now time.Time
	// NodeCtlUnreadyAfter is how long node-ctl may be down before the pool is Unready;
	// zero or negative means DefaultNodeCtlUnreadyAfter.
	NodeCtlUnreadyAfter time.Duration
}

// Result is the computed phase and why.
type Result struct {
	// Phase is the pool's phase.
	Phase v1alpha1.SandboxPoolPhase
	// Rule is the row of the table that matched, 1 to 10, for events and debugging.
	Rule int
	// Reason is the reason of the matched rule.
	Reason v1alpha1.PhaseReason
	// RequeueAfter is positive when the phase will change with time alone (rule 7: node-ctl
	// down, not yet for NodeCtlUnreadyAfter): the time until that boundary. Zero otherwise.
	RequeueAfter time.Duration
	// EverReady is the new sticky value: Input.EverReady or Phase is Ready.
	EverReady bool
}

// Compute returns the phase of a pool: the first row of the table (see the package
// documentation) that matches in.
func Compute(in Input) Result {
	rule, requeueAfter := match(in)
	o := outcomes[rule]
	return Result{
		Phase:        o.phase,
		Rule:         rule,
		Reason:       o.reason,
		RequeueAfter: requeueAfter,
		EverReady:    in.EverReady || o.phase == v1alpha1.PhaseReady,
	}
}

// match returns the first rule that matches in and, for rule 7, the time until rule 8 does.
func match(in Input) (rule int, requeueAfter time.Duration) {
	conds := in.Conditions
	// The pod is ready only on an explicit True; missing or Unknown is not ready.
	podReady := meta.IsStatusConditionTrue(conds, v1alpha1.ConditionPlaceholderPodReady.String())

	switch {
	case meta.IsStatusConditionTrue(conds, v1alpha1.ConditionNodeNotFound.String()):
		return RuleNodeNotFound, 0
	case meta.IsStatusConditionFalse(conds, v1alpha1.ConditionPlaceholderAgentHealthy.String()):
		switch {
		case podReady:
			return RuleAgentUnhealthyPodReady, 0
		case in.EverReady:
			return RuleAgentUnhealthyWasReady, 0
		default:
			return RuleAgentUnhealthyNeverReady, 0
		}
	case !podReady && in.EverReady:
		return RulePodNotReadyWasReady, 0
	case !podReady:
		return RulePodNotReadyNeverReady, 0
	}

	if nodeCtl := meta.FindStatusCondition(conds, v1alpha1.ConditionNodeCtlHealthy.String()); nodeCtl != nil && nodeCtl.Status == metav1.ConditionFalse {
		if left, known := graceLeft(in, nodeCtl); known && left > 0 {
			return RuleNodeCtlDown, left
		}
		return RuleNodeCtlDownTooLong, 0
	}

	if meta.IsStatusConditionFalse(conds, v1alpha1.ConditionResourceSynced.String()) &&
		!meta.IsStatusConditionTrue(conds, v1alpha1.ConditionResizeInProgress.String()) &&
		!meta.IsStatusConditionTrue(conds, v1alpha1.ConditionResizeDeferred.String()) {
		return RuleResourceNotSynced, 0
	}
	return RuleAllHealthy, 0
}

// graceLeft returns how long node-ctl may stay down before the pool is Unready, counted from
// in.NodeCtlDownSince or else from the False condition's LastTransitionTime. known is false
// when neither gives a start.
func graceLeft(in Input, nodeCtl *metav1.Condition) (left time.Duration, known bool) {
	var since time.Time
	switch {
	case in.NodeCtlDownSince != nil && !in.NodeCtlDownSince.IsZero():
		since = in.NodeCtlDownSince.Time
	case !nodeCtl.LastTransitionTime.IsZero():
		since = nodeCtl.LastTransitionTime.Time
	default:
		return 0, false
	}
	after := in.NodeCtlUnreadyAfter
	if after <= 0 {
		after = DefaultNodeCtlUnreadyAfter
	}
	// Sub saturates, so a far-off since or now cannot overflow.
	return since.Add(after).Sub(in.Now), true
}
