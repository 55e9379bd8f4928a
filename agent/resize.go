package agent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// DefaultWatermark is the share of a new, smaller memory size the pool's sandboxes may use
// for a downscale to go ahead (SPEC §3.5): 85 %.
const DefaultWatermark = 0.85

// staged are the resources whose changes are ordered against the pod's requests. Any other
// resource (hugepages, extended resources) is written to the manifest and node-ctl as is.
var staged = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// resizeInput is what the resize decision reads. All quantities are cpu/memory/… lists.
type resizeInput struct {
	// Desired is the effective policy: the override when enabled, else the class snapshot.
	Desired corev1.ResourceList
	// Applied is what node-ctl has applied; nil when it has applied nothing (or is down).
	Applied corev1.ResourceList
	// Pod is the requests of the placeholder pod the API server shows (the scheduler-visible
	// lock); nil while there is no pod.
	Pod corev1.ResourceList
	// AllocatedMemory is the memory the pool's sandboxes use (node-ctl's working set).
	AllocatedMemory int64
	// Watermark is the share of a smaller memory size usage may reach for a downscale.
	Watermark float64
}

// resizePlan is one step of the staged resize. The invariant it keeps: the pod's requests
// never fall below what node-ctl has applied. Growing: the manifest first, node-ctl only up to
// what the running pod requests. Shrinking: node-ctl first (when usage allows), the manifest
// only down to what node-ctl has applied.
type resizePlan struct {
	// Manifest is the requests (and limits) the manifest must carry now.
	Manifest corev1.ResourceList
	// NodeCtl is what node-ctl must apply now; nil: leave node-ctl alone.
	NodeCtl corev1.ResourceList
	// Synced: node-ctl and the pod both run exactly Desired.
	Synced bool
	// Deferred: a memory downscale waits because usage is above the watermark; Reason says so.
	Deferred bool
	Reason   string
}

// planResize decides the next step. It is a pure function of its input: the agent calls it
// on every pass, so a crash or restart at any point resumes from what it observes.
func planResize(in resizeInput) resizePlan {
	p := resizePlan{Manifest: corev1.ResourceList{}}
	for name, q := range in.Desired {
		p.Manifest[name] = q.DeepCopy()
	}
	// The manifest never asks for less than node-ctl has applied.
	for _, r := range staged {
		if a, ok := in.Applied[r]; ok && a.Cmp(p.Manifest[r]) > 0 {
			p.Manifest[r] = a.DeepCopy()
		}
	}

	target := corev1.ResourceList{}
	for name, q := range in.Desired {
		target[name] = q.DeepCopy()
	}
	for _, r := range staged {
		d := in.Desired[r]
		a, applied := in.Applied[r]
		pod, hasPod := in.Pod[r]
		switch {
		case !applied || d.Cmp(a) > 0:
			// Grow (or first apply): only up to what the running pod already locks.
			switch {
			case !hasPod && !applied:
				return p.withoutNodeCtl(in, "waiting for the placeholder pod before node-ctl applies the pool")
			case !hasPod:
				target[r] = a.DeepCopy()
			case pod.Cmp(d) < 0:
				if applied && pod.Cmp(a) < 0 {
					target[r] = a.DeepCopy() // never shrink on the way up
				} else {
					target[r] = pod.DeepCopy()
				}
			}
		case d.Cmp(a) < 0 && r == corev1.ResourceMemory:
			limit := int64(float64(d.Value()) * in.Watermark)
			if in.AllocatedMemory > limit {
				target[r] = a.DeepCopy()
				p.Deferred = true
				p.Reason = fmt.Sprintf("memory in use %s is above %.0f%% of the new size %s (%s)",
					readableBytes(in.AllocatedMemory), in.Watermark*100, d.String(), readableBytes(limit))
			}
		}
	}
	if !equalResources(target, in.Applied) {
		p.NodeCtl = target
	}
	p.Synced = in.Applied != nil && equalResources(in.Applied, in.Desired) && podRuns(in.Pod, in.Desired)
	return p
}

// readableBytes prints n for the deferred reason a person reads: "6.87Gi", "512Mi",
// "900Ki". Usage is rarely a round number, and a quantity would print it as raw bytes.
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

func (p resizePlan) withoutNodeCtl(in resizeInput, reason string) resizePlan {
	p.NodeCtl = nil
	p.Reason = reason
	return p
}

// podRuns reports whether the pod requests exactly want for the staged resources and at
// least want for the others.
func podRuns(pod, want corev1.ResourceList) bool {
	if pod == nil {
		return false
	}
	for name, q := range want {
		have, ok := pod[name]
		if !ok || have.Cmp(q) != 0 {
			return false
		}
	}
	return true
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
func resizeState(prev *v1alpha1.ResizeStatus, firstApply bool, p resizePlan, desired corev1.ResourceList) *v1alpha1.ResizeStatus {
	cpu, mem := desired.Cpu().DeepCopy(), desired.Memory().DeepCopy()
	switch {
	case p.Deferred:
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
