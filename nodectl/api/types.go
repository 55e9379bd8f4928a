// Package api is the node-ctl contract in Go: the wire types of the config file and of the
// HTTP API on node-ctl's unix socket, the constants both sides share, and the validation of
// a config. It is the one package the placeholder-agent (the writer of the config) and any
// node-ctl implementation (the reader) both import. docs/node-ctl-contract.md is the
// normative, language-neutral text; this package follows it.
package api

import (
	"net/http"
	"time"
)

// APIVersion is the version of the contract. It is the "apiVersion" of every config file and
// of every response body. Fields are never added to or removed from a version; a change of
// the wire format is a new version.
const APIVersion = "nodectl.sandbox-pool.io/v1"

// Defaults of the reference deployment (deploy/node/node-ctl.service).
const (
	// DefaultSocketPath is where node-ctl listens (HTTP/1.1, JSON, on a unix socket).
	DefaultSocketPath = "/run/sandbox-pool/node-ctl.sock"
	// DefaultConfigPath is where the agent writes the config and node-ctl reads it.
	DefaultConfigPath = "/etc/sandbox-pool/node-ctl.json"
	// DefaultCgroupPath is the cgroup the reference node-ctl enforces the pool in, relative
	// to the cgroup root of each controller: the slice, a child of kubelet's pod root on a
	// node whose kubelet runs the cgroupfs driver with the default cgroupRoot (see slice.go).
	DefaultCgroupPath = "/" + PodRootCgroupfs + "/sandbox-pool"
)

// Paths of the HTTP API.
const (
	// PathHealthz answers GET with Health: 200 when node-ctl is alive and can read its
	// cgroup, 503 (with Error) otherwise.
	PathHealthz = "/healthz"
	// PathState answers GET with State.
	PathState = "/v1/state"
	// PathReload answers POST (empty body) by re-reading the config file and applying it:
	// 200 with the new State, or an error status with Error.
	PathReload = "/v1/reload"
)

// Resource names node-ctl enforces. Every other resource in Config.Resources is validated
// as a quantity and passed through to State.AppliedResources untouched.
const (
	ResourceCPU    = "cpu"
	ResourceMemory = "memory"
)

// PoolRef names the SandboxPool a config belongs to.
type PoolRef struct {
	// Name is the SandboxPool's metadata.name.
	Name string `json:"name"`
	// UID is the SandboxPool's metadata.uid.
	UID string `json:"uid"`
}

// Config is the file the agent writes (DefaultConfigPath) and node-ctl applies on start and
// on every reload.
type Config struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion"`
	// Pool is the pool this node-ctl serves.
	Pool PoolRef `json:"pool"`
	// Generation is the SandboxPool's metadata.generation the resources come from. node-ctl
	// does not interpret it; it reports it back as State.AppliedGeneration once applied.
	Generation int64 `json:"generation"`
	// Resources is the pool's per-node quota: resource name to Kubernetes quantity string
	// ("500m", "64Mi"). cpu and memory are required and enforced; any other resource is
	// validated as a quantity and passed through.
	Resources map[string]string `json:"resources"`
}

// Health is the body of a GET PathHealthz.
type Health struct {
	APIVersion string `json:"apiVersion"`
	// Status is HealthOK when node-ctl is healthy.
	Status HealthStatus `json:"status"`
}

// HealthStatus is the value of Health.Status.
type HealthStatus string

// HealthOK is the only status of a healthy node-ctl; an unhealthy one answers 503 with Error.
const HealthOK HealthStatus = "ok"

// State is the body of a GET PathState and of a successful POST PathReload.
type State struct {
	APIVersion string `json:"apiVersion"`
	// Pool is the pool of the applied config; empty until a config has been applied.
	Pool PoolRef `json:"pool"`
	// AppliedGeneration is Config.Generation of the applied config; 0 until a config has
	// been applied.
	AppliedGeneration int64 `json:"appliedGeneration"`
	// AppliedResources is Config.Resources of the applied config, verbatim.
	AppliedResources map[string]string `json:"appliedResources,omitempty"`
	// AppliedAt is when the applied config was applied; nil until then.
	AppliedAt *time.Time `json:"appliedAt,omitempty"`
	// AllocatableMemoryBytes is the memory limit in force, read back from the system (it
	// may be rounded down to a page); 0 when no limit is set.
	AllocatableMemoryBytes int64 `json:"allocatableMemoryBytes"`
	// AllocatedMemoryBytes is the memory in use by the pool's sandboxes: the working set
	// (usage minus inactive file cache, as the kubelet counts it). A memory limit below it
	// is refused.
	AllocatedMemoryBytes int64 `json:"allocatedMemoryBytes"`
	// MemoryUsageBytes is the raw usage including all page cache; informational.
	MemoryUsageBytes int64 `json:"memoryUsageBytes"`
	// Zone is the node's zone, as node-ctl was configured (the reference: --zone).
	Zone string `json:"zone,omitempty"`
	// StartedAt is when this node-ctl process started.
	StartedAt time.Time `json:"startedAt"`
	// PID is node-ctl's process id, for SIGHUP (reload) and SIGTERM (restart).
	PID int `json:"pid"`
	// CgroupPath is the cgroup the pool is enforced in (implementation-defined).
	CgroupPath string `json:"cgroupPath,omitempty"`
	// CgroupVersion is "v1" or "v2" (implementation-defined).
	CgroupVersion string `json:"cgroupVersion,omitempty"`
	// LastReloadTime is when the last reload (successful or not) finished; nil before the
	// first.
	LastReloadTime *time.Time `json:"lastReloadTime,omitempty"`
	// LastReloadError is why the last reload failed; nil when it succeeded. The applied
	// fields above are those of the last successful reload.
	LastReloadError *Error `json:"lastReloadError,omitempty"`
}

// Applied reports whether a config has been applied since node-ctl started.
func (s *State) Applied() bool { return s.AppliedGeneration > 0 }

// Error is the body of every error response and State.LastReloadError.
type Error struct {
	// Message says what went wrong, for humans.
	Message string `json:"error"`
	// Field is the config field at fault ("resources[memory]"), when there is one.
	Field string `json:"field,omitempty"`
	// Reason is a machine-readable cause.
	Reason Reason `json:"reason"`
}

// Error implements error.
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Reason is the machine-readable cause of an Error.
type Reason string

// Reasons, with the HTTP status node-ctl answers them with.
const (
	// ReasonConfigNotFound (400): the config file does not exist.
	ReasonConfigNotFound Reason = "ConfigNotFound"
	// ReasonInvalidConfig (400): the file is unreadable, not JSON, or a field is invalid.
	ReasonInvalidConfig Reason = "InvalidConfig"
	// ReasonMemoryInUse (409): the memory limit is below what the sandboxes use now; the
	// config is valid and may apply later.
	ReasonMemoryInUse Reason = "MemoryInUse"
	// ReasonCgroupError (500): the system refused the limits for another reason, or the
	// cgroup cannot be read.
	ReasonCgroupError Reason = "CgroupError"
	// ReasonNotFound (404): no such path.
	ReasonNotFound Reason = "NotFound"
	// ReasonMethodNotAllowed (405): wrong HTTP method for the path.
	ReasonMethodNotAllowed Reason = "MethodNotAllowed"
)

// HTTPStatus is the status node-ctl answers an error of reason r with.
func (r Reason) HTTPStatus() int {
	switch r {
	case ReasonConfigNotFound, ReasonInvalidConfig:
		return http.StatusBadRequest
	case ReasonMemoryInUse:
		return http.StatusConflict
	case ReasonNotFound:
		return http.StatusNotFound
	case ReasonMethodNotAllowed:
		return http.StatusMethodNotAllowed
	default:
		return http.StatusInternalServerError
	}
}
