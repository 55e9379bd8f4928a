package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Field docs live in schema/*.cue (they become the CRD's kubectl explain text); the
// comments here only say what is particular to Go.

// ResourcePolicy says how much of a node is carved out for sandboxes.
type ResourcePolicy struct {
	Resources corev1.ResourceList `json:"resources"`
}

// PlaceholderPodTemplate shapes the static placeholder pod.
type PlaceholderPodTemplate struct {
	Annotations       map[string]string   `json:"annotations,omitempty"`
	Tolerations       []corev1.Toleration `json:"tolerations,omitempty"`
	RuntimeClassName  string              `json:"runtimeClassName,omitempty"`
	Priority          *int32              `json:"priority,omitempty"`
	PriorityClassName string              `json:"priorityClassName,omitempty"`
	AgentImage        string              `json:"agentImage,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxPoolClass declares, for a set of nodes, how much of each is reserved for sandboxes.
type SandboxPoolClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxPoolClassSpec   `json:"spec"`
	Status SandboxPoolClassStatus `json:"status,omitzero"`
}

// SandboxPoolClassSpec is what a cluster admin declares.
type SandboxPoolClassSpec struct {
	Selector       metav1.LabelSelector   `json:"selector"`
	ResourcePolicy ResourcePolicy         `json:"resourcePolicy"`
	PlaceholderPod PlaceholderPodTemplate `json:"placeholderPod,omitzero"`
}

// SandboxPoolClassStatus is written by the controller. The counts are always written.
type SandboxPoolClassStatus struct {
	ObservedGeneration   int64              `json:"observedGeneration,omitempty"`
	TotalSandboxPools    int32              `json:"totalSandboxPools"`
	ReadySandboxPools    int32              `json:"readySandboxPools"`
	NotReadySandboxPools int32              `json:"notReadySandboxPools"`
	Conditions           []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxPoolClassList is a list of classes.
type SandboxPoolClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxPoolClass `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxPool is the pool of one node.
type SandboxPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxPoolSpec   `json:"spec"`
	Status SandboxPoolStatus `json:"status,omitzero"`
}

// ClassRef names the owning class.
type ClassRef struct {
	Name string `json:"name"`
}

// SandboxPoolSpec is set by the controller and, for override, by operators.
type SandboxPoolSpec struct {
	ClassRef       ClassRef               `json:"classRef"`
	NodeName       string                 `json:"nodeName"`
	ResourcePolicy ResourcePolicy         `json:"resourcePolicy"`
	PlaceholderPod PlaceholderPodTemplate `json:"placeholderPod,omitzero"`
	Override       *Override              `json:"override,omitempty"`
	NodeCtl        *NodeCtlConfig         `json:"nodeCtl,omitempty"`
}

// Override is an operator's per-node exception to the class policy.
type Override struct {
	Enabled        bool            `json:"enabled"`
	Reason         string          `json:"reason,omitempty"`
	ResourcePolicy *ResourcePolicy `json:"resourcePolicy,omitempty"`
}

// NodeCtlConfig describes the node-local sandbox daemon.
type NodeCtlConfig struct {
	Endpoint string `json:"endpoint,omitempty"`
}

// SandboxPoolStatus has two writers; see the field managers in names.go. Optional scalars
// are pointers so that an explicit false or 0 survives a round trip and a server-side apply.
type SandboxPoolStatus struct {
	Phase                 SandboxPoolPhase        `json:"phase,omitempty"`
	PlaceholderPod        *PlaceholderPodStatus   `json:"placeholderPod,omitempty"`
	PlaceholderAgent      *PlaceholderAgentStatus `json:"placeholderAgent,omitempty"`
	Override              *OverrideStatus         `json:"override,omitempty"`
	Resize                *ResizeStatus           `json:"resize,omitempty"`
	NodeCtl               *NodeCtlStatus          `json:"nodeCtl,omitempty"`
	PoolInfo              *PoolInfo               `json:"poolInfo,omitempty"`
	LastAppliedGeneration *int64                  `json:"lastAppliedGeneration,omitempty"`
	Conditions            []metav1.Condition      `json:"conditions,omitempty"`
}

// PlaceholderPodStatus is the mirror pod kubelet created from the static manifest.
type PlaceholderPodStatus struct {
	Name  string `json:"name,omitempty"`
	UID   string `json:"uid,omitempty"`
	Phase string `json:"phase,omitempty"`
	IP    string `json:"ip,omitempty"`
}

// PlaceholderAgentStatus describes the agent serving the pool.
type PlaceholderAgentStatus struct {
	Version        string       `json:"version,omitempty"`
	LastHeartbeat  *metav1.Time `json:"lastHeartbeat,omitempty"`
	NodeCtlStarted *bool        `json:"nodeCtlStarted,omitempty"`
	NodeCtlStartAt *metav1.Time `json:"nodeCtlStartAt,omitempty"`
}

// OverrideStatus is the override the agent has applied.
type OverrideStatus struct {
	Enabled      *bool          `json:"enabled,omitempty"`
	Reason       string         `json:"reason,omitempty"`
	Source       OverrideSource `json:"source,omitempty"`
	OverriddenAt *metav1.Time   `json:"overriddenAt,omitempty"`
}

// ResizeStatus is the resize in flight or last finished; nil means no resize.
type ResizeStatus struct {
	Status          ResizeState        `json:"status"`
	RequestedCPU    *resource.Quantity `json:"requestedCpu,omitempty"`
	RequestedMemory *resource.Quantity `json:"requestedMemory,omitempty"`
	DeferredReason  string             `json:"deferredReason,omitempty"`
	LastProbeTime   *metav1.Time       `json:"lastProbeTime,omitempty"`
}

// NodeCtlStatus is the agent's view of node-ctl.
type NodeCtlStatus struct {
	Connected     *bool        `json:"connected,omitempty"`
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`
	DownSince     *metav1.Time `json:"downSince,omitempty"`
}

// PoolInfo is node-ctl's report of the pool.
type PoolInfo struct {
	Zone                   string `json:"zone,omitempty"`
	AllocatableMemoryBytes *int64 `json:"allocatableMemoryBytes,omitempty"`
	AllocatedMemoryBytes   *int64 `json:"allocatedMemoryBytes,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxPoolList is a list of pools.
type SandboxPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxPool `json:"items"`
}
