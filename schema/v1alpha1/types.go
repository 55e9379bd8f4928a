package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The field docs below are written by make generate from schema/*.cue, the same text as the
// CRD's descriptions (kubectl explain): edit them there. Type docs are written here and say
// what is particular to Go.

// ResourcePolicy says how much of a node is carved out for sandboxes.
type ResourcePolicy struct {
	// resources is the per-node quota: the placeholder pod requests exactly this and node-ctl
	// enforces it. Must contain cpu and memory, each > 0.
	// +required
	// +kubebuilder:validation:MaxProperties=32
	Resources corev1.ResourceList `json:"resources,omitempty"`
}

// PlaceholderPodTemplate shapes the static placeholder pod.
type PlaceholderPodTemplate struct {
	// annotations added to the placeholder pod, next to the sandbox-pool.io/ ones the agent
	// sets itself. At most 64, each value at most 3584 characters (so that together they stay
	// under Kubernetes' 256 KiB for a pod's annotations).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`

	// tolerations of the placeholder pod, so it may run on tainted nodes. At most 64.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// runtimeClassName of the placeholder pod. The RuntimeClass must exist and its handler must
	// be configured in containerd; "placeholder" runs the pod with no process.
	// +optional
	// +kubebuilder:default="placeholder"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName string `json:"runtimeClassName,omitempty"`

	// priority is the numeric pod priority of the placeholder pod. Static pods never resolve a
	// priorityClassName by themselves, and kubelet's eviction ordering needs the number. It is
	// only valid next to priorityClassName: the API server's Priority admission plugin rejects
	// a mirror pod whose number differs from the one its PriorityClass (or the cluster default)
	// gives, so a bare number would leave the pool without a mirror pod. On a class, leave it
	// out; the controller writes the PriorityClass's value into each pool.
	// +optional
	Priority *int32 `json:"priority,omitempty"`

	// priorityClassName names a PriorityClass. On a class, the controller resolves it and
	// writes both the name and its numeric value into each pool's snapshot, so the mirror pod
	// passes the Priority admission plugin while kubelet sees the number.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status

// SandboxPoolClass declares, for a set of nodes, how much of each is reserved for sandboxes.
type SandboxPoolClass struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the class.
	// +required
	Spec SandboxPoolClassSpec `json:"spec,omitzero"`

	// status is observed by the controller. Absent until the controller writes it, and never
	// empty.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	Status SandboxPoolClassStatus `json:"status,omitzero"`
}

// SandboxPoolClassSpec is what a cluster admin declares.
type SandboxPoolClassSpec struct {
	// selector picks the nodes that get a pool. Immutable: changing it would mass-delete and
	// mass-create pools. To change the node set, relabel nodes or recreate the class.
	// +required
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// resourcePolicy is the per-node quota every pool of this class reserves.
	// +required
	ResourcePolicy ResourcePolicy `json:"resourcePolicy,omitzero"`

	// placeholderPod shapes the placeholder pod of every pool of this class.
	// +optional
	// +kubebuilder:default={"runtimeClassName":"placeholder"}
	// +kubebuilder:validation:MinProperties=1
	PlaceholderPod PlaceholderPodTemplate `json:"placeholderPod,omitzero"`
}

// SandboxPoolClassStatus is written by the controller. The counts are always written (the
// controller sets them, 0 too).
type SandboxPoolClassStatus struct {
	// conditions of the class: NodeConflict when another class already owns a selected node,
	// PoolsSynced when every selected node has a pool with the class's policy. No other types,
	// one entry each: a map list keyed by type.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// capacity sums what the class's pools hold and use, from each pool's status.capacity and
	// status.poolInfo. Kept by the controller; it changes only when a pool's figures do.
	// +optional
	Capacity *ClassCapacity `json:"capacity,omitempty"`

	// observedGeneration is the class generation the status was computed from.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// totalSandboxPools is the number of pools this class owns.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	TotalSandboxPools *int32 `json:"totalSandboxPools,omitempty"`

	// readySandboxPools is the number of this class's pools in phase Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ReadySandboxPools *int32 `json:"readySandboxPools,omitempty"`

	// notReadySandboxPools is the number of this class's pools not in phase Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	NotReadySandboxPools *int32 `json:"notReadySandboxPools,omitempty"`
}

// CapacityFigures are the capacity figures of a set of pools.
type CapacityFigures struct {
	// cpu the pools' placeholder pods hold: the sum of each pool's status.capacity.cpu, what
	// the scheduler and kubelet count as taken on the pools' nodes.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	CPU *resource.Quantity `json:"cpu,omitempty"`

	// memory the pools' placeholder pods hold: the sum of each pool's status.capacity.memory.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	Memory *resource.Quantity `json:"memory,omitempty"`

	// allocatedMemory is the memory the pools' sandboxes use, as node-ctl reports it: the sum
	// of each pool's status.poolInfo.allocatedMemoryBytes, rounded up to a whole mebibyte.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	AllocatedMemory *resource.Quantity `json:"allocatedMemory,omitempty"`

	// freeMemory is the memory node-ctl can still hand to new sandboxes on the pools in phase
	// Ready: the sum of their allocatableMemoryBytes less allocatedMemoryBytes (none below
	// zero), rounded down to a whole mebibyte.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	FreeMemory *resource.Quantity `json:"freeMemory,omitempty"`
}

// ClassCapacity is the capacity of a class: its pools' figures summed, in all and per zone.
type ClassCapacity struct {
	CapacityFigures `json:",inline"`

	// zones has the figures of the pools whose node-ctl reports a zone (status.poolInfo.zone),
	// one entry per zone. Pools without a zone count in the totals only.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=zone
	Zones []ZoneCapacity `json:"zones,omitempty"`
}

// ZoneCapacity is the capacity of a class's pools in one zone.
type ZoneCapacity struct {
	// zone the pools' node-ctl reports.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Zone string `json:"zone,omitempty"`

	// pools is the number of the class's pools in the zone (a zone is listed for the pools in
	// it).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	Pools int32 `json:"pools,omitempty"`

	CapacityFigures `json:",inline"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// SandboxPoolClassList is a list of classes.
type SandboxPoolClassList struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard list metadata.
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the classes.
	Items []SandboxPoolClass `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status

// SandboxPool is the pool of one node.
type SandboxPool struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata. The name is always the deterministic pool name
	// of spec.nodeName ("placeholder-" + node name).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the pool.
	// +required
	Spec SandboxPoolSpec `json:"spec,omitzero"`

	// status is reported by the node's placeholder-agent and the controller. Absent until one
	// of them writes it, and never empty.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	Status SandboxPoolStatus `json:"status,omitzero"`
}

// ClassRef names the owning class.
type ClassRef struct {
	// name of the owning SandboxPoolClass. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// SandboxPoolSpec is set by the controller and, for override, by operators.
type SandboxPoolSpec struct {
	// classRef names the class that owns this pool. Set by the controller; immutable.
	// +required
	ClassRef ClassRef `json:"classRef,omitzero"`

	// nodeName is the node this pool reserves capacity on. Set by the controller; immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// resourcePolicy is the controller's snapshot of the class's policy, kept in sync.
	// +required
	ResourcePolicy ResourcePolicy `json:"resourcePolicy,omitzero"`

	// placeholderPod is the controller's snapshot of the class's placeholder pod template, with
	// priorityClassName resolved to its numeric priority.
	// +optional
	// +kubebuilder:default={"runtimeClassName":"placeholder"}
	// +kubebuilder:validation:MinProperties=1
	PlaceholderPod PlaceholderPodTemplate `json:"placeholderPod,omitzero"`

	// override replaces the class policy on this one node when enabled. Written by operators.
	// +optional
	Override *Override `json:"override,omitempty"`

	// nodeCtl describes the node-local sandbox daemon. Informational: the agent's
	// --node-ctl-socket flag is the source of truth today.
	// +optional
	NodeCtl *NodeCtlConfig `json:"nodeCtl,omitempty"`
}

// Override is an operator's per-node exception to the class policy.
type Override struct {
	// enabled makes the agent use override.resourcePolicy instead of the class snapshot.
	// +optional
	// +kubebuilder:default=false
	Enabled *bool `json:"enabled,omitempty"`

	// reason says why this node differs (required when enabled), e.g. a ticket number.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// resourcePolicy used on this node while enabled (required when enabled).
	// +optional
	ResourcePolicy ResourcePolicy `json:"resourcePolicy,omitzero"`
}

// NodeCtlConfig describes the node-local sandbox daemon.
type NodeCtlConfig struct {
	// endpoint of node-ctl; only unix:// sockets are accepted.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Endpoint string `json:"endpoint,omitempty"`
}

// SandboxPoolStatus has two writers; see the field managers in names.go. Optional scalars
// are pointers so that an explicit false or 0 survives a round trip and a server-side apply.
type SandboxPoolStatus struct {
	// conditions of the pool: PlaceholderPodReady, ResourceSynced, NodeCtlHealthy,
	// ResizeInProgress, ResizeDeferred (agent); PlaceholderAgentHealthy, NodeNotFound
	// (controller). No other types, one entry each: a map list keyed by type, so each writer
	// owns its own entries.
	// +optional
	// +kubebuilder:validation:MaxItems=7
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// phase aggregates the conditions: Pending (never ready yet), Ready, Degraded (serving but
	// impaired), Unready. Written by the controller only.
	// +optional
	// +kubebuilder:validation:Enum=Degraded;Pending;Ready;Unready
	Phase SandboxPoolPhase `json:"phase,omitempty"`

	// placeholderPod is the mirror pod kubelet created from the static manifest.
	// +optional
	PlaceholderPod *PlaceholderPodStatus `json:"placeholderPod,omitempty"`

	// placeholderAgent describes the agent serving this pool.
	// +optional
	PlaceholderAgent *PlaceholderAgentStatus `json:"placeholderAgent,omitempty"`

	// override is the override the agent has applied.
	// +optional
	Override *OverrideStatus `json:"override,omitempty"`

	// resize is the resize in flight or last finished. Absent means no resize.
	// +optional
	Resize ResizeStatus `json:"resize,omitzero"`

	// nodeCtl is the agent's view of node-ctl.
	// +optional
	NodeCtl *NodeCtlStatus `json:"nodeCtl,omitempty"`

	// capacity is what the pool holds and uses, as quantities (kubectl get sp shows them).
	// Reported by the agent with the rest of its status.
	// +optional
	Capacity *PoolCapacity `json:"capacity,omitempty"`

	// poolInfo is node-ctl's report of the pool.
	// +optional
	PoolInfo *PoolInfo `json:"poolInfo,omitempty"`

	// lastAppliedGeneration is the pool generation the agent last applied in full.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LastAppliedGeneration *int64 `json:"lastAppliedGeneration,omitempty"`
}

// PlaceholderPodStatus is the mirror pod kubelet created from the static manifest.
type PlaceholderPodStatus struct {
	// name of the mirror pod.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// uid of the mirror pod.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid,omitempty"`

	// phase of the mirror pod: Pending, Running, Succeeded, Failed or Unknown.
	// +optional
	// +kubebuilder:validation:Enum=Failed;Pending;Running;Succeeded;Unknown
	Phase corev1.PodPhase `json:"phase,omitempty"`

	// ip of the pod; only set with --netns-enabled (host network otherwise).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	IP string `json:"ip,omitempty"`
}

// PlaceholderAgentStatus describes the agent serving the pool.
type PlaceholderAgentStatus struct {
	// version of the placeholder-agent binary.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// lastHeartbeat is informational only; liveness comes from the pool's Lease.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`

	// nodeCtlStarted is true once the agent has started node-ctl for this pool.
	// +optional
	NodeCtlStarted *bool `json:"nodeCtlStarted,omitempty"`

	// nodeCtlStartAt is when the agent started node-ctl.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	NodeCtlStartAt *metav1.Time `json:"nodeCtlStartAt,omitempty"`
}

// OverrideStatus is the override the agent has applied.
type OverrideStatus struct {
	// enabled is true while the agent applies spec.override.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// reason copied from spec.override.reason.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// source of the applied policy: Class (the class snapshot, the override disabled) or
	// Override (spec.override.resourcePolicy).
	// +optional
	// +kubebuilder:validation:Enum=Class;Override
	Source OverrideSource `json:"source,omitempty"`

	// overriddenAt is when the override took effect.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OverriddenAt *metav1.Time `json:"overriddenAt,omitempty"`
}

// ResizeStatus is the resize in flight or last finished; absent (the zero value) means no resize.
type ResizeStatus struct {
	// status of the resize: InProgress, Completed or Deferred (a downscale waiting until memory
	// usage falls below the watermark).
	// +required
	// +kubebuilder:validation:Enum=Completed;Deferred;InProgress
	Status ResizeState `json:"status,omitempty"`

	// requestedCpu is the cpu the resize aims for.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RequestedCPU *resource.Quantity `json:"requestedCpu,omitempty"`

	// requestedMemory is the memory the resize aims for.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RequestedMemory *resource.Quantity `json:"requestedMemory,omitempty"`

	// deferredReason says why a downscale is deferred.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	DeferredReason string `json:"deferredReason,omitempty"`

	// lastProbeTime is when the agent last checked whether the resize can proceed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// NodeCtlStatus is the agent's view of node-ctl.
type NodeCtlStatus struct {
	// connected is true when the last poll of node-ctl succeeded.
	// +optional
	Connected *bool `json:"connected,omitempty"`

	// lastHeartbeat is when node-ctl last answered.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`

	// downSince is when node-ctl stopped answering; drives the 5-minute Degraded to Unready
	// rule. Absent while node-ctl is healthy.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DownSince *metav1.Time `json:"downSince,omitempty"`
}

// PoolCapacity is what the pool holds and uses, as quantities.
type PoolCapacity struct {
	// cpu the pool's placeholder pods hold: the requests of those kubelet has admitted, which
	// kubelet and the scheduler count as taken on the node. During a resize it moves from the
	// old size to the new one as kubelet admits and removes the placeholder pods.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	CPU *resource.Quantity `json:"cpu,omitempty"`

	// memory the pool's placeholder pods hold, as cpu.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	Memory *resource.Quantity `json:"memory,omitempty"`

	// allocatedMemory is poolInfo.allocatedMemoryBytes rounded up to a whole mebibyte.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Minimum=0
	AllocatedMemory *resource.Quantity `json:"allocatedMemory,omitempty"`
}

// PoolInfo is node-ctl's report of the pool.
type PoolInfo struct {
	// zone of the node, as node-ctl reports it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Zone string `json:"zone,omitempty"`

	// allocatableMemoryBytes is the memory node-ctl can hand to sandboxes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AllocatableMemoryBytes *int64 `json:"allocatableMemoryBytes,omitempty"`

	// allocatedMemoryBytes is the memory sandboxes use now.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AllocatedMemoryBytes *int64 `json:"allocatedMemoryBytes,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// SandboxPoolList is a list of pools.
type SandboxPoolList struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard list metadata.
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the pools.
	Items []SandboxPool `json:"items"`
}
