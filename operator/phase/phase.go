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

// Reason is a CamelCase machine-readable reason for a phase, fit for an event reason or a
// condition reason.
type Reason string

// Reasons, one per row of the table (rules 2 to 4 share ReasonAgentLeaseExpired; the Rule
// number in the Result tells them apart).
const (
	// ReasonNodeNotFound: the pool's node does not exist (rule 1).
	ReasonNodeNotFound Reason = "NodeNotFound"
	// ReasonAgentLeaseExpired: the node's placeholder-agent stopped renewing its Lease
	// (rules 2, 3 and 4).
	ReasonAgentLeaseExpired Reason = "AgentLeaseExpired"
	// ReasonNeverReady: the placeholder pod is not ready and the pool has never been Ready
	// (rule 5).
	ReasonNeverReady Reason = "NeverReady"
	// ReasonPodNotReady: the placeholder pod is no longer ready (rule 6).
	ReasonPodNotReady Reason = "PodNotReady"
	// ReasonNodeCtlDown: node-ctl is down, for less than NodeCtlUnreadyAfter (rule 7).
	ReasonNodeCtlDown Reason = "NodeCtlDown"
	// ReasonNodeCtlDownTooLong: node-ctl has been down for NodeCtlUnreadyAfter or longer
	// (rule 8).
	ReasonNodeCtlDownTooLong Reason = "NodeCtlDownTooLong"
	// ReasonResourceNotSynced: node-ctl or the placeholder pods do not run the pool's
	// resources, and no resize in progress or deferred explains it (rule 9).
	ReasonResourceNotSynced Reason = "ResourceNotSynced"
	// ReasonAllHealthy: nothing is wrong (rule 10).
	ReasonAllHealthy Reason = "AllHealthy"
)

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
	reason Reason
}{
	RuleNodeNotFound:             {v1alpha1.PhaseUnready, ReasonNodeNotFound},
	RuleAgentUnhealthyNeverReady: {v1alpha1.PhasePending, ReasonAgentLeaseExpired},
	RuleAgentUnhealthyWasReady:   {v1alpha1.PhaseUnready, ReasonAgentLeaseExpired},
	RuleAgentUnhealthyPodReady:   {v1alpha1.PhaseDegraded, ReasonAgentLeaseExpired},
	RulePodNotReadyNeverReady:    {v1alpha1.PhasePending, ReasonNeverReady},
	RulePodNotReadyWasReady:      {v1alpha1.PhaseUnready, ReasonPodNotReady},
	RuleNodeCtlDown:              {v1alpha1.PhaseDegraded, ReasonNodeCtlDown},
	RuleNodeCtlDownTooLong:       {v1alpha1.PhaseUnready, ReasonNodeCtlDownTooLong},
	RuleResourceNotSynced:        {v1alpha1.PhaseDegraded, ReasonResourceNotSynced},
	RuleAllHealthy:               {v1alpha1.PhaseReady, ReasonAllHealthy},
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
	// Reason is the CamelCase reason of the matched rule.
	Reason Reason
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
	podReady := meta.IsStatusConditionTrue(conds, v1alpha1.ConditionPlaceholderPodReady)

	switch {
	case meta.IsStatusConditionTrue(conds, v1alpha1.ConditionNodeNotFound):
		return RuleNodeNotFound, 0
	case meta.IsStatusConditionFalse(conds, v1alpha1.ConditionPlaceholderAgentHealthy):
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

	if nodeCtl := meta.FindStatusCondition(conds, v1alpha1.ConditionNodeCtlHealthy); nodeCtl != nil && nodeCtl.Status == metav1.ConditionFalse {
		if left, known := graceLeft(in, nodeCtl); known && left > 0 {
			return RuleNodeCtlDown, left
		}
		return RuleNodeCtlDownTooLong, 0
	}

	if meta.IsStatusConditionFalse(conds, v1alpha1.ConditionResourceSynced) &&
		!meta.IsStatusConditionTrue(conds, v1alpha1.ConditionResizeInProgress) &&
		!meta.IsStatusConditionTrue(conds, v1alpha1.ConditionResizeDeferred) {
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
