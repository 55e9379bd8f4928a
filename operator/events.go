package operator

// Reasons of the controller's events. An event that reports what a condition shows
// (NodeConflict, LeaseHolderMismatch) carries that condition's reason (schema/v1alpha1).
const (
	EventReasonSuccessfulCreate = "SuccessfulCreate"
	EventReasonSuccessfulUpdate = "SuccessfulUpdate"
	EventReasonSuccessfulDelete = "SuccessfulDelete"
	// EventReasonFinalizerTimeout: a deleted pool's mirror pod outlived --finalizer-timeout.
	EventReasonFinalizerTimeout = "FinalizerTimeout"
	// EventReasonNodeGone: the pool of a node gone for --node-gone-grace was deleted.
	EventReasonNodeGone = "NodeGone"
)

// Actions of the controller's events (events.k8s.io/v1 requires one).
const (
	ActionCreatePool     = "CreatePool"
	ActionUpdatePool     = "UpdatePool"
	ActionDeletePool     = "DeletePool"
	ActionRemoveFinalize = "RemoveFinalizer"
	ActionIgnoreLease    = "IgnoreLease"
)
