package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/internal/ssa"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// reportedStatus is the last status the agent applied and the memory figure it carried.
type reportedStatus struct {
	applied   *v1alpha1.SandboxPoolStatus
	allocated int64
	// own are the pool's resourceVersions of the agent's last writes: the ones they were
	// computed from and the ones they produced. While the cache shows one of them it holds
	// no other writer's change to the agent's fields; after writes in quick succession it
	// may still show an earlier one of its own.
	own []string
}

// ownVersions is how many of its own resourceVersions per pool the agent remembers.
const ownVersions = 8

// allocatedStep is how far the reported memory in use may drift before a status write:
// the larger of 16 MiB and 2 % of the allocatable memory. Usage moves all the time; the
// status is not a time series.
func allocatedStep(allocatable int64) int64 {
	return max(16<<20, allocatable/50)
}

// report applies the agent's part of the pool's status (field manager placeholder-agent)
// when any field differs from the last one applied. Heartbeat timestamps are refreshed on
// each write but never cause one.
func (a *Agent) report(ctx context.Context, pool *v1alpha1.SandboxPool, ps pass) error {
	now := metav1.NewTime(a.opts.Clock.Now())
	a.mu.Lock()
	prev := a.poolStateLocked(pool.Name).reported
	a.mu.Unlock()
	nc := ps.nc

	st := v1alpha1.SandboxPoolStatus{}
	if pod := a.shownPod(ps); pod != nil {
		st.PlaceholderPod = &v1alpha1.PlaceholderPodStatus{Name: pod.Name, UID: string(pod.UID), Phase: pod.Status.Phase}
		if a.opts.NetnsEnabled {
			st.PlaceholderPod.IP = pod.Status.PodIP
		}
	}
	st.PlaceholderAgent = &v1alpha1.PlaceholderAgentStatus{Version: a.opts.Version, NodeCtlStarted: ptr.To(nc.Healthy)}
	if nc.State != nil && !nc.State.StartedAt.IsZero() {
		st.PlaceholderAgent.NodeCtlStartAt = &metav1.Time{Time: nc.State.StartedAt.UTC().Truncate(1e9)}
	}
	st.Override = overrideStatus(pool.Spec.Override, pool.Status.Override, now)
	shown := shownResize(pool.Status)
	resize := resizeState(shown, ps.applied == nil, ps.plan, ps.desired)
	if resize != nil && resize.Status != v1alpha1.ResizeCompleted && shown != nil &&
		shown.Status == resize.Status && shown.LastProbeTime != nil {
		resize.LastProbeTime = shown.LastProbeTime
	} else if resize != nil && resize != shown {
		resize = resize.DeepCopy()
		resize.LastProbeTime = &now
	}
	if resize != nil {
		st.Resize = *resize
	}
	st.NodeCtl = &v1alpha1.NodeCtlStatus{Connected: ptr.To(nc.Healthy)}
	if nc.DownSince != nil {
		st.NodeCtl.DownSince = &metav1.Time{Time: nc.DownSince.UTC().Truncate(1e9)}
	}
	allocated := prev.allocated
	if nc.State != nil {
		st.PoolInfo = &v1alpha1.PoolInfo{Zone: nc.State.Zone, AllocatableMemoryBytes: ptr.To(nc.State.AllocatableMemoryBytes)}
		if d := nc.State.AllocatedMemoryBytes - prev.allocated; d >= allocatedStep(nc.State.AllocatableMemoryBytes) ||
			-d >= allocatedStep(nc.State.AllocatableMemoryBytes) || prev.applied == nil {
			allocated = nc.State.AllocatedMemoryBytes
		}
		st.PoolInfo.AllocatedMemoryBytes = ptr.To(allocated)
	}
	st.Capacity = poolCapacity(ps.plan.Lock, st.PoolInfo)
	st.LastAppliedGeneration = pool.Status.LastAppliedGeneration
	if ps.plan.Synced {
		st.LastAppliedGeneration = ptr.To(pool.Generation)
	}
	st.Conditions = a.conditions(pool, ps)

	if onItsWay(pool, prev, &st, a.opts.Clock.Now()) {
		// Nothing to tell yet that the pool's phase would show (Pending either way); the
		// pass comes back when the pod starts, and reports then.
		return nil
	}
	if midResize(prev.applied, &st) && midResize(agentFields(pool.Status), &st) {
		// The resize the pool shows moves on without a fault: its progress is not news.
		return nil
	}
	if !ssa.StatusChanged(prev.applied, &st, volatileStatusFields...) {
		if slices.Contains(prev.own, pool.ResourceVersion) {
			return nil
		}
		// Someone wrote the pool since: rewrite only if the agent's fields are not what
		// it applied (e.g. another writer cleared them).
		if !ssa.StatusChanged(agentFields(pool.Status), &st, volatileStatusFields...) {
			return nil
		}
		logf.FromContext(ctx).Info("the agent's status fields were changed by another writer; applying them again")
	}
	rvBefore := pool.ResourceVersion
	// A write is due: refresh the heartbeats.
	st.PlaceholderAgent.LastHeartbeat = &now
	if nc.Healthy {
		st.NodeCtl.LastHeartbeat = &metav1.Time{Time: nc.LastOK.UTC().Truncate(1e9)}
	}
	if err := ssa.ApplyStatus(ctx, a.client, pool, &st, v1alpha1.FieldManagerAgent); err != nil {
		return err
	}
	statusWrites.Inc()
	a.mu.Lock()
	own := append(slices.Clone(prev.own), rvBefore, pool.ResourceVersion)
	a.poolStateLocked(pool.Name).reported = reportedStatus{applied: st.DeepCopy(), allocated: allocated, own: own[max(0, len(own)-ownVersions):]}
	a.mu.Unlock()
	logf.FromContext(ctx).V(1).Info("status applied")
	return nil
}

// firstReportGrace is how long a new pool's first status may wait for its placeholder pod
// to start (onItsWay).
const firstReportGrace = 30 * time.Second

// onItsWay reports whether st, the agent's first status for a pool that has none from any
// agent, may be left unwritten: the pool is younger than firstReportGrace, and st says only
// that its placeholder pod has not started yet, with node-ctl answering and nothing
// deferred or refused. The controller shows such a pool Pending with or without it, and a
// first status that waits for the pod carries it Ready in one write instead of two. A pool
// still on its way after the grace is reported as it is.
func onItsWay(pool *v1alpha1.SandboxPool, prev reportedStatus, st *v1alpha1.SandboxPoolStatus, now time.Time) bool {
	if prev.applied != nil || len(agentFields(pool.Status).Conditions) > 0 || now.Sub(pool.CreationTimestamp.Time) >= firstReportGrace {
		return false
	}
	for _, c := range st.Conditions {
		switch v1alpha1.ConditionType(c.Type) {
		case v1alpha1.ConditionPlaceholderPodReady:
			if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPodNotRunning.String() {
				return false
			}
		case v1alpha1.ConditionNodeCtlHealthy:
			if c.Status != metav1.ConditionTrue {
				return false
			}
		case v1alpha1.ConditionResizeDeferred:
			if c.Status != metav1.ConditionFalse {
				return false
			}
		}
	}
	return true
}

// shownResize is the status.resize of s, nil when it has none (no resize).
func shownResize(s v1alpha1.SandboxPoolStatus) *v1alpha1.ResizeStatus {
	if s.Resize.Status == "" {
		return nil
	}
	return &s.Resize
}

// midResize reports whether shown (a status written before) and st both say that the same
// resize moves without a fault: ResizeInProgress, to the same requested resources, the
// placeholder pods ready, node-ctl answering, nothing deferred, ResourceSynced False only
// because the pieces or node-ctl are on their way. Such a status is written as the resize
// starts and again as it ends (or meets a fault), not at every step between (a piece added,
// running, folded: a write each, which the phase never shows).
func midResize(shown, st *v1alpha1.SandboxPoolStatus) bool {
	moving := func(s *v1alpha1.SandboxPoolStatus) bool {
		if s == nil || s.Resize.Status != v1alpha1.ResizeInProgress {
			return false
		}
		want := map[v1alpha1.ConditionType]metav1.ConditionStatus{
			v1alpha1.ConditionResizeInProgress: metav1.ConditionTrue, v1alpha1.ConditionPlaceholderPodReady: metav1.ConditionTrue,
			v1alpha1.ConditionNodeCtlHealthy: metav1.ConditionTrue, v1alpha1.ConditionResizeDeferred: metav1.ConditionFalse,
			v1alpha1.ConditionResourceSynced: metav1.ConditionFalse,
		}
		for typ, status := range want {
			c := meta.FindStatusCondition(s.Conditions, typ.String())
			if c == nil || c.Status != status {
				return false
			}
			if typ == v1alpha1.ConditionResourceSynced && c.Reason != v1alpha1.ReasonResizing.String() &&
				c.Reason != v1alpha1.ReasonWaitingForKubelet.String() {
				return false
			}
		}
		return true
	}
	return moving(shown) && moving(st) && sameQuantity(shown.Resize.RequestedCPU, st.Resize.RequestedCPU) &&
		sameQuantity(shown.Resize.RequestedMemory, st.Resize.RequestedMemory)
}

func sameQuantity(a, b *resource.Quantity) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Cmp(*b) == 0)
}

// overrideStatus is status.override for the pool's spec.override (nil without one): the
// source of the policy the agent applies, and since when an enabled override has been
// applied (kept from the previous status while it stays enabled).
func overrideStatus(o *v1alpha1.Override, prev *v1alpha1.OverrideStatus, now metav1.Time) *v1alpha1.OverrideStatus {
	if o == nil {
		return nil
	}
	enabled := ptr.Deref(o.Enabled, false)
	st := &v1alpha1.OverrideStatus{Enabled: ptr.To(enabled), Reason: o.Reason, Source: v1alpha1.OverrideSourceClass}
	if enabled {
		st.Source = v1alpha1.OverrideSourceOverride
		at := now
		if prev != nil && prev.Enabled != nil && *prev.Enabled && prev.OverriddenAt != nil {
			at = *prev.OverriddenAt
		}
		st.OverriddenAt = &at
	}
	return st
}

// poolCapacity is status.capacity: what the pool's admitted placeholder pods hold (the
// lock, as kubelet and the scheduler count it) and the memory in use that poolInfo reports.
// It changes only with the lock, which the ResizeInProgress message names, and with
// poolInfo: it never causes a write of its own.
func poolCapacity(held corev1.ResourceList, info *v1alpha1.PoolInfo) *v1alpha1.PoolCapacity {
	c := &v1alpha1.PoolCapacity{CPU: ptr.To(held.Cpu().DeepCopy()), Memory: ptr.To(held.Memory().DeepCopy())}
	if info != nil && info.AllocatedMemoryBytes != nil {
		c.AllocatedMemory = ptr.To(v1alpha1.MebibytesUp(*info.AllocatedMemoryBytes))
	}
	return c
}

// shownPod is the placeholder pod status.placeholderPod shows: the newest running piece's
// mirror pod, else the newest mirror pod of the pool's pieces.
func (a *Agent) shownPod(ps pass) *corev1.Pod {
	var shown *corev1.Pod
	for _, running := range []bool{true, false} {
		for _, pc := range ps.obs.pieces {
			if m := ps.obs.mirrors[a.mirrorName(pc.Number)]; m != nil && (!running || pc.State == lock.Running) {
				shown = m
			}
		}
		if shown != nil {
			return shown
		}
	}
	return nil
}

// volatileStatusFields are the agent's status fields that change without anything having
// happened: refreshed on each write, they never cause one.
var volatileStatusFields = []string{"placeholderAgent.lastHeartbeat", "nodeCtl.lastHeartbeat", "resize.lastProbeTime", "override.overriddenAt"}

// agentFields is the part of a pool's status the agent owns (docs/design.md §4), as read back.
func agentFields(s v1alpha1.SandboxPoolStatus) *v1alpha1.SandboxPoolStatus {
	own := &v1alpha1.SandboxPoolStatus{PlaceholderPod: s.PlaceholderPod, PlaceholderAgent: s.PlaceholderAgent,
		Override: s.Override, Resize: s.Resize, NodeCtl: s.NodeCtl, Capacity: s.Capacity, PoolInfo: s.PoolInfo,
		LastAppliedGeneration: s.LastAppliedGeneration}
	for _, c := range s.Conditions {
		if isAgentCondition(c.Type) {
			own.Conditions = append(own.Conditions, c)
		}
	}
	return own
}

// conditions computes the agent's five conditions, keeping transition times of those whose
// status did not change.
func (a *Agent) conditions(pool *v1alpha1.SandboxPool, ps pass) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range pool.Status.Conditions {
		if isAgentCondition(c.Type) {
			out = append(out, c)
		}
	}
	set := func(typ v1alpha1.ConditionType, ok bool, reason v1alpha1.ConditionReason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&out, metav1.Condition{Type: typ.String(), Status: s, Reason: reason.String(), Message: msg, ObservedGeneration: pool.Generation})
	}
	plan, nc := ps.plan, ps.nc

	ready, reason, msg := a.readiness(ps)
	set(v1alpha1.ConditionPlaceholderPodReady, ready, reason, msg)

	if nc.Healthy {
		set(v1alpha1.ConditionNodeCtlHealthy, true, v1alpha1.ReasonNodeCtlHealthy, "node-ctl answers on "+a.opts.NodeCtlSocket)
	} else {
		set(v1alpha1.ConditionNodeCtlHealthy, false, v1alpha1.ReasonNodeCtlUnreachable, "node-ctl: "+nc.Err)
	}

	switch {
	case plan.Synced:
		set(v1alpha1.ConditionResourceSynced, true, v1alpha1.ReasonSynced, "node-ctl and the placeholder pods hold the pool's resources")
	case plan.Unrunnable != "":
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonPodUnrunnable, plan.Unrunnable)
	case plan.Deferred != "":
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonResizeDeferred, plan.Reason)
	case ps.nodeCtlErr != nil:
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonNodeCtlRejected, ps.nodeCtlErr.Error())
	case !nc.Healthy:
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonNodeCtlUnreachable, "node-ctl does not answer")
	case plan.Waiting != "":
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonWaitingForKubelet, plan.Waiting)
	default:
		set(v1alpha1.ConditionResourceSynced, false, v1alpha1.ReasonResizing, "moving node-ctl and the placeholder pods to the pool's resources")
	}

	// A resize in progress moves without a fault: node-ctl answers and takes its configs.
	// The pool stays Ready meanwhile (the old lock holds); a fault makes it Degraded.
	inProgress := !plan.Synced && plan.Deferred == "" && plan.Unrunnable == "" && ps.nodeCtlErr == nil && nc.Healthy
	reason = v1alpha1.ReasonNoResize
	if inProgress {
		reason = v1alpha1.ReasonResizeInProgress
	}
	set(v1alpha1.ConditionResizeInProgress, inProgress, reason,
		fmt.Sprintf("the pool asks for %s; the placeholder pods hold %s", lock.Text(ps.desired), lock.Text(plan.Lock)))
	if plan.Deferred != "" {
		set(v1alpha1.ConditionResizeDeferred, true, plan.Deferred, plan.Reason)
	} else {
		set(v1alpha1.ConditionResizeDeferred, false, v1alpha1.ReasonNoResize, "no resize is waiting")
	}
	return out
}

// readiness is PlaceholderPodReady: the pool's placeholder pods run, as their mirror pods
// and the shim both say, and hold at least what node-ctl may be running in both counts:
// kubelet's (it runs them) and the scheduler's (their mirror pods are in the API server).
// A pod added for a resize that is not running yet does not count against it; a running one
// that broke does.
func (a *Agent) readiness(ps pass) (bool, v1alpha1.ConditionReason, string) {
	type why struct {
		reason v1alpha1.ConditionReason
		msg    string
	}
	var broken, missing, waiting *why
	covered := corev1.ResourceList{}
	var running []string
	for _, pc := range ps.obs.pieces {
		name := a.mirrorName(pc.Number)
		mirror := ps.obs.mirrors[name]
		sh, known := a.shimFor(name)
		switch {
		case known && sh.Started && sh.Exited && pc.State != lock.Pending && pc.State != lock.Rejected:
			broken = &why{v1alpha1.ReasonShimExited, fmt.Sprintf("the placeholder shim of %s (pid %d) is gone without a word", name, sh.PID)}
		case pc.State == lock.Running && known && !sh.Started:
			if broken == nil || broken.reason != v1alpha1.ReasonShimExited {
				broken = &why{v1alpha1.ReasonShimStopped, "the placeholder shim stopped " + name}
			}
		case pc.State == lock.Running && pc.Unseen:
			missing = &why{v1alpha1.ReasonMirrorPodMissing, "the scheduler does not count " + name +
				": kubelet runs it, but its mirror pod is not in the API server (kubelet creates it again on its next sync)"}
		case pc.State == lock.Running:
			if pc.Trusted {
				lock.AddTo(covered, pc.Res)
				running = append(running, name)
			}
		case pc.State == lock.Rejected:
			waiting = &why{v1alpha1.ReasonPodRejected, "kubelet refused " + name + ": " + pc.Reason}
		case pc.Unrunnable:
			if waiting == nil || waiting.reason != v1alpha1.ReasonPodRejected {
				waiting = &why{v1alpha1.ReasonPodUnrunnable, name + ": " + pc.Reason}
			}
		case pc.State == lock.Admitted && mirror != nil && mirror.Status.Phase == corev1.PodRunning:
			if waiting == nil || waiting.reason != v1alpha1.ReasonPodRejected {
				waiting = &why{v1alpha1.ReasonPodNotReady, name + " runs but is not ready" + readyMessage(mirror)}
			}
		default:
			if waiting == nil {
				state := "kubelet has not admitted it yet"
				if mirror != nil {
					state = "it is " + string(mirror.Status.Phase)
				}
				waiting = &why{v1alpha1.ReasonPodNotRunning, name + " is not running: " + state}
			}
		}
	}
	if broken != nil {
		return false, broken.reason, broken.msg
	}
	if len(running) > 0 && lock.Covers(covered, ps.applied) {
		return true, v1alpha1.ReasonPodsRunning, "placeholder pods " + strings.Join(running, ", ") + " run and hold " + lock.Text(covered)
	}
	if missing != nil {
		return false, missing.reason, missing.msg
	}
	if waiting != nil {
		return false, waiting.reason, waiting.msg
	}
	if len(running) > 0 {
		return false, v1alpha1.ReasonPodNotRunning, "the running placeholder pods hold " + lock.Text(covered) + ", less than node-ctl runs (" + lock.Text(ps.applied) + ")"
	}
	return false, v1alpha1.ReasonPodNotRunning, "the pool has no placeholder pod yet"
}

// readyMessage is ": " and the message of the pod's Ready condition, if it has one.
func readyMessage(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Message != "" {
			return ": " + c.Message
		}
	}
	return ""
}

func isAgentCondition(t string) bool {
	return slices.Contains(v1alpha1.AgentConditions, v1alpha1.ConditionType(t))
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
