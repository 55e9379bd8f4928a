package agent

import (
	"strconv"
	"strings"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// DefaultWatermark is the share of a new, smaller memory size the pool's sandboxes may use
// for a downscale to go ahead: 85 %.
const DefaultWatermark = 0.85

// readableBytes prints n for a reason a person reads: "6.87Gi", "512Mi", "900Ki". Usage is
// rarely a round number, and a quantity would print it as raw bytes.
func readableBytes(n int64) string {
	for _, u := range []struct {
		size int64
		unit string
	}{{1 << 40, "Ti"}, {1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if n >= u.size {
			v := strconv.FormatFloat(float64(n)/float64(u.size), 'f', 2, 64)
			return strings.TrimSuffix(strings.TrimRight(v, "0"), ".") + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// equalResources compares two lists by value (1000m equals 1).
func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for name, q := range a {
		o, ok := b[name]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// resizeState is the status.resize the agent reports for a plan, given the previous one. nil
// means "no resize": the pool has never been resized since the agent first applied it.
func resizeState(prev *v1alpha1.ResizeStatus, firstApply bool, p lockPlan, desired corev1.ResourceList) *v1alpha1.ResizeStatus {
	cpu, mem := desired.Cpu().DeepCopy(), desired.Memory().DeepCopy()
	switch {
	case p.Deferred != "":
		return &v1alpha1.ResizeStatus{Status: v1alpha1.ResizeDeferred, RequestedCPU: &cpu, RequestedMemory: &mem, DeferredReason: p.Reason}
	case firstApply:
		return prev // the first apply is not a resize
	case !p.Synced:
		return &v1alpha1.ResizeStatus{Status: v1alpha1.ResizeInProgress, RequestedCPU: &cpu, RequestedMemory: &mem}
	case prev != nil && prev.Status != v1alpha1.ResizeCompleted:
		return &v1alpha1.ResizeStatus{Status: v1alpha1.ResizeCompleted, RequestedCPU: &cpu, RequestedMemory: &mem}
	}
	return prev
}
