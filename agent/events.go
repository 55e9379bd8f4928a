package agent

// Reasons of the agent's events. An event that reports what a condition shows (PodRejected,
// ResizeDeferred) carries that condition's reason (schema/v1alpha1).
const (
	// EventReasonInvalidPool: the pool fails the schema; its manifests are left as they are.
	EventReasonInvalidPool = "InvalidPool"
	// EventReasonResizeDeferredTooLong: a resize has waited for --resize-deferred-warning-after.
	EventReasonResizeDeferredTooLong = "ResizeDeferredTooLong"
	// EventReasonResizeCompleted: the pool holds its new size.
	EventReasonResizeCompleted = "ResizeCompleted"
)

// Actions of the agent's events (events.k8s.io/v1 requires one).
const (
	ActionResize   = "Resize"
	ActionValidate = "Validate"
)
