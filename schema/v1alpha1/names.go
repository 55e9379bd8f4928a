package v1alpha1

// API identity.
const (
	GroupName = "sandboxpool.agentcube.volcano.sh"
	Version   = "v1alpha1"

	KindSandboxPoolClass = "SandboxPoolClass"
	KindSandboxPool      = "SandboxPool"

	ResourceSandboxPoolClasses = "sandboxpoolclasses"
	ResourceSandboxPools       = "sandboxpools"
)

// Labels and annotations on pools and placeholder pods (docs/design.md §2).
const (
	LabelPrefix = "sandbox-pool.io/"

	// LabelClass names the owning class (pool and pod label).
	LabelClass = LabelPrefix + "class"
	// LabelNode names the node (pool and pod label).
	LabelNode = LabelPrefix + "node"
	// LabelPoolName names the owning pool (pod label and annotation).
	LabelPoolName = LabelPrefix + "pool-name"
	// AnnotationPoolName is the pool name as an annotation on the pod.
	AnnotationPoolName = LabelPoolName
	// AnnotationPoolUID is the pool UID in the manifest: the orphan test at agent start.
	AnnotationPoolUID = LabelPrefix + "pool-uid"
	// LabelSkipCgroup tells the placeholder shim to create no cgroup (label and annotation).
	LabelSkipCgroup = LabelPrefix + "skip-cgroup"
	// AnnotationSkipCgroup is LabelSkipCgroup as an annotation.
	AnnotationSkipCgroup = LabelSkipCgroup
	// AnnotationManifestHash is the SHA-256 of the rendered static pod manifest.
	AnnotationManifestHash = LabelPrefix + "manifest-hash"
	// AnnotationEverReady on a pool is set by the controller the first time the pool is
	// Ready and never removed: the sticky EverReady of the phase table (docs/design.md §3.4), kept in
	// metadata because the controller owns only phase and two conditions in status.
	AnnotationEverReady = LabelPrefix + "ever-ready"
)

// DefaultSystemNamespace is the namespace of the default install: the controller and
// webhook Deployments, their service accounts and the controller's leader-election Lease.
const DefaultSystemNamespace = "sandbox-pool-system"

// Lease liveness (docs/design.md §3.4): each agent renews a coordination.k8s.io Lease named after its
// pool, in a namespace of the operator's choosing (Leases are namespaced). The default is a
// namespace of its own, like kube-node-lease: the agents' only Lease grant is a Role there
// (deploy/rbac), so a node can renew pool Leases but not touch the controller's
// leader-election Lease or anything else.
const DefaultLeaseNamespace = "sandbox-pool-node-lease"

// LeaseServiceAccountPrefix names the per-node service accounts, in the Lease namespace,
// that renew the Leases where the NodeRestriction admission plugin forbids a node identity
// any Lease but its own in kube-node-lease: the agent of node N renews with
// system:serviceaccount:<lease namespace>:placeholder-agent-N (its --lease-kubeconfig).
// The node admission policy (deploy/rbac/node-policy.yaml) lets it write N's pool's
// Lease and nothing else.
const LeaseServiceAccountPrefix = "placeholder-agent-"

// OperatorGroup is the group deploy/rbac binds the sandbox-pool-operator role to, and the
// webhook's default --operator-groups: its members may change a pool's spec.override only.
const OperatorGroup = "sandbox-pool:operators"

// The placeholder pod (docs/design.md §3.5): a static pod the node's placeholder-agent writes into
// kubelet's manifest directory. kubelet names its mirror pod PlaceholderPodName + "-" +
// the node name; with one pool per node that name is unique.
const (
	// PlaceholderPodName is metadata.name of every placeholder static pod.
	PlaceholderPodName = "sandbox-pool"
	// DefaultPodNamespace is the namespace of the placeholder pods unless the agent is told
	// otherwise. kubelet runs a static pod whatever its namespace, but creates its mirror pod
	// only when the namespace exists.
	DefaultPodNamespace = DefaultSystemNamespace
)

// The RuntimeClass of the placeholder pods (deploy/runtimeclass.yaml). A class names it in
// spec.placeholderPod.runtimeClassName (DefaultRuntimeClassName unless it says otherwise);
// the webhook admits only a RuntimeClass that exists and whose handler is
// PlaceholderRuntimeHandler, the CRI runtime handler of the placeholder shim
// (deploy/containerd/placeholder.toml), since kubelet admits a piece it cannot run
// otherwise.
const (
	DefaultRuntimeClassName   = "placeholder"
	PlaceholderRuntimeHandler = "placeholder"
)

// Server-side apply field managers: the two writers of SandboxPool status (docs/design.md §4).
const (
	FieldManagerAgent      = "placeholder-agent"
	FieldManagerController = "sandboxpool-controller"
)

// Finalizers (docs/design.md §2: both kinds use finalizers for ordered deletion).
const (
	// FinalizerClassPools keeps a class until the controller has deleted all its pools.
	FinalizerClassPools = GroupName + "/pools"
	// FinalizerPoolPlaceholderPod keeps a pool until its mirror pod is gone (or the
	// controller's finalizer timeout passes).
	FinalizerPoolPlaceholderPod = GroupName + "/placeholder-pod"
)

// SandboxPoolPhase is the aggregated phase of a pool.
type SandboxPoolPhase string

// Phases of a pool (docs/design.md §3.4).
const (
	PhasePending  SandboxPoolPhase = "Pending"
	PhaseReady    SandboxPoolPhase = "Ready"
	PhaseDegraded SandboxPoolPhase = "Degraded"
	PhaseUnready  SandboxPoolPhase = "Unready"
)

// PhaseReason says which row of the phase table (package operator/phase) gave a pool its
// phase.
type PhaseReason string

func (r PhaseReason) String() string { return string(r) }

// Reasons of a pool's phase, one per row of the table; rules 2 to 4 share
// PhaseReasonAgentLeaseExpired.
const (
	// PhaseReasonNodeNotFound: the pool's node does not exist (rule 1).
	PhaseReasonNodeNotFound PhaseReason = "NodeNotFound"
	// PhaseReasonAgentLeaseExpired: the node's placeholder-agent stopped renewing its Lease
	// (rules 2, 3 and 4).
	PhaseReasonAgentLeaseExpired PhaseReason = "AgentLeaseExpired"
	// PhaseReasonNeverReady: the placeholder pod is not ready and the pool has never been
	// Ready (rule 5).
	PhaseReasonNeverReady PhaseReason = "NeverReady"
	// PhaseReasonPodNotReady: the placeholder pod is no longer ready (rule 6).
	PhaseReasonPodNotReady PhaseReason = "PodNotReady"
	// PhaseReasonNodeCtlDown: node-ctl is down, for less than the controller's
	// --nodectl-unready-after (rule 7).
	PhaseReasonNodeCtlDown PhaseReason = "NodeCtlDown"
	// PhaseReasonNodeCtlDownTooLong: node-ctl has been down for --nodectl-unready-after or
	// longer (rule 8).
	PhaseReasonNodeCtlDownTooLong PhaseReason = "NodeCtlDownTooLong"
	// PhaseReasonResourceNotSynced: node-ctl or the placeholder pods do not run the pool's
	// resources, and no resize in progress or deferred explains it (rule 9).
	PhaseReasonResourceNotSynced PhaseReason = "ResourceNotSynced"
	// PhaseReasonAllHealthy: nothing is wrong (rule 10).
	PhaseReasonAllHealthy PhaseReason = "AllHealthy"
)

// OverrideSource is status.override.source: where the policy the agent applies comes from.
type OverrideSource string

// Sources of the applied policy.
const (
	// OverrideSourceClass: the class snapshot (spec.resourcePolicy); the override is disabled.
	OverrideSourceClass OverrideSource = "Class"
	// OverrideSourceOverride: the override (spec.override.resourcePolicy).
	OverrideSourceOverride OverrideSource = "Override"
)

// ResizeState is the state of a resize in status.resize.status.
type ResizeState string

// Resize states. Absent status.resize means no resize; there is no "None".
const (
	ResizeInProgress ResizeState = "InProgress"
	ResizeCompleted  ResizeState = "Completed"
	ResizeDeferred   ResizeState = "Deferred"
)
