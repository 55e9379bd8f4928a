package agent

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// DefaultWatermark is the share of a new, smaller memory size the pool's sandboxes may use
// for a downscale to go ahead: 85 %.
const DefaultWatermark = 0.85

// resizeState is the status.resize the agent reports for a plan, given the previous one. nil
// means "no resize": the pool has never been resized since the agent first applied it.
func resizeState(prev *v1alpha1.ResizeStatus, firstApply bool, p lock.Step, desired corev1.ResourceList) *v1alpha1.ResizeStatus {
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

// Backoff after kubelet refused a piece of a pool: the first retry after rejectionBackoff,
// doubling up to maxRejectionBackoff.
const (
	rejectionBackoff    = 5 * time.Second
	maxRejectionBackoff = 5 * time.Minute
)

// resizeNotes is what the agent remembers of a pool's resize between passes: when the
// current deferral began and what it has said of it, and kubelet's last refusal.
type resizeNotes struct {
	deferredSince time.Time
	deferredKind  lock.Deferral
	warnedLong    bool
	rejectedAt    time.Time
	rejections    int
	lastRejection string
	inProgress    bool
	// unrunnable is why a piece of the pool's spec of generation unrunnableGen could not be
	// run, until a piece runs and the pool is synced, or the spec changes.
	unrunnable    string
	unrunnableGen int64
}

// noteRejection records that kubelet refused a piece of pool, for the backoff, and says so.
func (a *Agent) noteRejection(pool *v1alpha1.SandboxPool, pc lock.Piece) {
	a.mu.Lock()
	n := &a.poolStateLocked(pool.Name).resize
	n.rejectedAt, n.rejections = a.opts.Clock.Now(), n.rejections+1
	n.lastRejection = "kubelet refused placeholder pod " + a.mirrorName(pc.Number) + ": " + pc.Reason
	a.mu.Unlock()
	a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonPodRejected.String(), ActionResize,
		"kubelet refused placeholder pod %s (%s); the pods that run keep the lock: %s", a.mirrorName(pc.Number), lock.Text(pc.Res), pc.Reason)
}

// noteUnrunnable records that kubelet did not run a piece of pool within the bound and the
// piece is removed: the next one waits for the backoff, and the pool is reported Degraded
// until a piece of this spec runs or the spec changes.
func (a *Agent) noteUnrunnable(pool *v1alpha1.SandboxPool, pc lock.Piece) {
	why := "kubelet cannot run placeholder pod " + a.mirrorName(pc.Number) + ": " + pc.Reason
	a.mu.Lock()
	n := &a.poolStateLocked(pool.Name).resize
	n.rejectedAt, n.rejections = a.opts.Clock.Now(), n.rejections+1
	n.lastRejection, n.unrunnable, n.unrunnableGen = why, why, pool.Generation
	a.mu.Unlock()
	a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonPodUnrunnable.String(), ActionResize,
		"%s (%s); removed, the pods that run keep the lock, tried again after a backoff", why, lock.Text(pc.Res))
}

// unrunnable is why a piece of pool's current spec could not be run, "" when none could not
// since the pool was last synced.
func (a *Agent) unrunnable(pool *v1alpha1.SandboxPool) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := &a.poolStateLocked(pool.Name).resize
	if n.unrunnableGen != pool.Generation {
		n.unrunnable = ""
	}
	return n.unrunnable
}

// rejectionBackoff reports whether kubelet refused a piece of pool (or could not run one)
// too recently to ask again, and its word then.
func (a *Agent) rejectionBackoff(pool string) (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.poolStateLocked(pool).resize
	if n.rejections == 0 {
		return false, ""
	}
	wait := min(rejectionBackoff<<min(n.rejections-1, 16), maxRejectionBackoff)
	return a.opts.Clock.Since(n.rejectedAt) < wait, n.lastRejection
}

// noteResize emits the resize's events: a Warning when a resize starts to wait (and once
// more past DeferredWarningAfter), a Normal event when one completes.
func (a *Agent) noteResize(pool *v1alpha1.SandboxPool, ps pass) {
	p := ps.plan
	a.mu.Lock()
	n := &a.poolStateLocked(pool.Name).resize
	now := a.opts.Clock.Now()
	var events []func()
	switch {
	case p.Deferred == "":
		n.deferredSince, n.deferredKind, n.warnedLong = time.Time{}, "", false
	case n.deferredKind != p.Deferred:
		n.deferredSince, n.deferredKind, n.warnedLong = now, p.Deferred, false
		reason := p.Reason
		events = append(events, func() {
			a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonResizeDeferred.String(), ActionResize, "Resize deferred: %s", reason)
		})
	case !n.warnedLong && now.Sub(n.deferredSince) >= a.opts.DeferredWarningAfter:
		n.warnedLong = true
		d, reason := now.Sub(n.deferredSince).Round(time.Second), p.Reason
		events = append(events, func() {
			a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, EventReasonResizeDeferredTooLong, ActionResize, "Resize deferred for %s: %s", d, reason)
		})
	}
	if ps.applied != nil && !p.Synced {
		n.inProgress = true
	}
	if p.Synced {
		if n.inProgress {
			held := lock.Text(p.Lock)
			events = append(events, func() {
				a.recorder.Eventf(pool, nil, corev1.EventTypeNormal, EventReasonResizeCompleted, ActionResize, "The pool holds %s", held)
			})
		}
		n.inProgress, n.rejections, n.lastRejection, n.unrunnable = false, 0, "", ""
	}
	a.mu.Unlock()
	for _, e := range events {
		e()
	}
}
