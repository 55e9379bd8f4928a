package v1alpha1

// ConditionType is the type of a condition in status.conditions.
type ConditionType string

func (t ConditionType) String() string { return string(t) }

// ConditionReason is the reason of a condition in status.conditions.
type ConditionReason string

func (r ConditionReason) String() string { return string(r) }

// Condition types of SandboxPool (docs/design.md §3.4). The agent owns the first five, the
// controller the last two (docs/design.md §4). The CRD admits these and no other
// (#PoolConditionTypes in schema/sandboxpool.cue; TestConditionTypesMatchSchema).
const (
	// ConditionPlaceholderPodReady is True while the pool's placeholder pods run and hold at
	// least what node-ctl runs.
	ConditionPlaceholderPodReady ConditionType = "PlaceholderPodReady"
	// ConditionResourceSynced is True when node-ctl and the placeholder pods hold the pool's
	// resources.
	ConditionResourceSynced ConditionType = "ResourceSynced"
	// ConditionNodeCtlHealthy is True while node-ctl answers.
	ConditionNodeCtlHealthy ConditionType = "NodeCtlHealthy"
	// ConditionResizeInProgress is True while a resize moves without a fault.
	ConditionResizeInProgress ConditionType = "ResizeInProgress"
	// ConditionResizeDeferred is True while a resize waits; its reason says for what.
	ConditionResizeDeferred ConditionType = "ResizeDeferred"
	// ConditionPlaceholderAgentHealthy is True while the node's agent renews the pool's Lease.
	ConditionPlaceholderAgentHealthy ConditionType = "PlaceholderAgentHealthy"
	// ConditionNodeNotFound is True when the pool's node does not exist.
	ConditionNodeNotFound ConditionType = "NodeNotFound"
)

// AgentConditions are the condition types of a pool the placeholder-agent writes.
var AgentConditions = []ConditionType{ConditionPlaceholderPodReady, ConditionResourceSynced, ConditionNodeCtlHealthy,
	ConditionResizeInProgress, ConditionResizeDeferred}

// ControllerConditions are the condition types of a pool only the controller may write.
var ControllerConditions = []ConditionType{ConditionPlaceholderAgentHealthy, ConditionNodeNotFound}

// Reasons of SandboxPool conditions, by the condition (and status) that carries them.
const (
	// PlaceholderPodReady.
	ReasonPodsRunning   ConditionReason = "PodsRunning"   // True
	ReasonPodNotRunning ConditionReason = "PodNotRunning" // a piece is not running yet, or the running ones hold too little
	ReasonPodNotReady   ConditionReason = "PodNotReady"   // a piece runs but is not ready
	ReasonPodRejected   ConditionReason = "PodRejected"   // kubelet refused a piece
	ReasonShimStopped   ConditionReason = "ShimStopped"   // the placeholder shim stopped a running piece
	ReasonShimExited    ConditionReason = "ShimExited"    // the placeholder shim's process is gone without a word
	// ReasonMirrorPodMissing: kubelet runs a piece the lock needs, but its mirror pod is not
	// in the API server (deleted, or not created again yet), so the scheduler does not
	// count it.
	ReasonMirrorPodMissing ConditionReason = "MirrorPodMissing"
	// ReasonPodUnrunnable: kubelet has not run a piece within the agent's
	// --piece-start-timeout (a RuntimeClass or handler the node does not have, an image it
	// cannot get); also ResourceSynced=False, which makes the pool Degraded while the pieces
	// that run hold the lock.
	ReasonPodUnrunnable ConditionReason = "PodUnrunnable"

	// NodeCtlHealthy, and ResourceSynced=False while node-ctl does not answer.
	ReasonNodeCtlHealthy     ConditionReason = "Healthy"     // True
	ReasonNodeCtlUnreachable ConditionReason = "Unreachable" // False

	// ResourceSynced.
	ReasonSynced            ConditionReason = "Synced"            // True
	ReasonResizing          ConditionReason = "Resizing"          // node-ctl and the pieces move to the pool's resources
	ReasonWaitingForKubelet ConditionReason = "WaitingForKubelet" // kubelet has not admitted a new piece yet
	ReasonNodeCtlRejected   ConditionReason = "NodeCtlRejected"   // node-ctl refused the config
	ReasonResizeDeferred    ConditionReason = "ResizeDeferred"    // the resize waits (ResizeDeferred=True says why)

	// ResizeInProgress, and ResizeDeferred=False.
	ReasonResizeInProgress ConditionReason = "ResizeInProgress" // ResizeInProgress=True
	ReasonNoResize         ConditionReason = "NoResize"         // False

	// ResizeDeferred=True: what the resize waits for.
	ReasonInsufficientRoom    ConditionReason = "InsufficientRoom"    // room on the node for a growth, as the scheduler counts it
	ReasonRejectedByKubelet   ConditionReason = "RejectedByKubelet"   // kubelet refused the growth's piece
	ReasonUsageAboveWatermark ConditionReason = "UsageAboveWatermark" // the sandboxes' memory to fall below the watermark of a smaller size

	// PlaceholderAgentHealthy.
	ReasonLeaseRenewed  ConditionReason = "LeaseRenewed"  // True
	ReasonLeaseExpired  ConditionReason = "LeaseExpired"  // not renewed within the controller's --lease-ttl
	ReasonLeaseNotFound ConditionReason = "LeaseNotFound" // the agent has not reported
	// ReasonLeaseHolderMismatch: the pool's Lease is held by someone other than the pool's
	// node (spec.holderIdentity), so it says nothing about that node's agent and is ignored.
	ReasonLeaseHolderMismatch ConditionReason = "LeaseHolderMismatch"

	// NodeNotFound.
	ReasonNodeNotFound ConditionReason = "NodeNotFound" // True
	ReasonNodeExists   ConditionReason = "NodeExists"   // False
)

// Condition types of SandboxPoolClass.
const (
	// ConditionNodeConflict is True when another class already owns a selected node.
	ConditionNodeConflict ConditionType = "NodeConflict"
	// ConditionPoolsSynced is True when every selected node has a pool with the class's
	// current policy snapshot.
	ConditionPoolsSynced ConditionType = "PoolsSynced"
)

// ClassConditions are the condition types of a class (the controller writes them all).
var ClassConditions = []ConditionType{ConditionNodeConflict, ConditionPoolsSynced}

// Reasons of SandboxPoolClass conditions.
const (
	// NodeConflict.
	ReasonNodeConflict ConditionReason = "NodeConflict" // True
	ReasonNoConflict   ConditionReason = "NoConflict"   // False

	// PoolsSynced.
	ReasonAllPoolsSynced        ConditionReason = "AllPoolsSynced"        // True
	ReasonProgressing           ConditionReason = "Progressing"           // the burst cap left creates for the next pass
	ReasonSyncFailed            ConditionReason = "SyncFailed"            // a write failed; retried
	ReasonPriorityClassNotFound ConditionReason = "PriorityClassNotFound" // placeholderPod.priorityClassName names no PriorityClass
	ReasonInvalidSelector       ConditionReason = "InvalidSelector"       // spec.selector does not parse
)
