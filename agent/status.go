package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// allocatedStep is how far the reported memory in use may drift before a status write:
// the larger of 16 MiB and 2 % of the allocatable memory. Usage moves all the time; the
// status is not a time series.
func allocatedStep(allocatable int64) int64 {
	return max(16<<20, allocatable/50)
}

// report applies the agent's part of the pool's status (field manager placeholder-agent)
// when any field differs from the last one applied. Heartbeat timestamps are refreshed on
// each write but never cause one.
func (a *Agent) report(ctx context.Context, pool *v1alpha1.SandboxPool, pod *corev1.Pod, nc nodeCtlView,
	plan resizePlan, firstApply bool, nodeCtlErr error, desired corev1.ResourceList) error {
	now := metav1.NewTime(a.opts.Clock.Now())
	a.mu.Lock()
	prev := a.reported[pool.Name]
	shim, shimKnown := a.shim[pool.Name]
	a.mu.Unlock()

	st := v1alpha1.SandboxPoolStatus{}
	if pod != nil {
		st.PlaceholderPod = &v1alpha1.PlaceholderPodStatus{Name: pod.Name, UID: string(pod.UID), Phase: string(pod.Status.Phase)}
		if a.opts.NetnsEnabled {
			st.PlaceholderPod.IP = pod.Status.PodIP
		}
	}
	st.PlaceholderAgent = &v1alpha1.PlaceholderAgentStatus{Version: a.opts.Version, NodeCtlStarted: ptr.To(nc.Healthy)}
	if nc.State != nil && !nc.State.StartedAt.IsZero() {
		st.PlaceholderAgent.NodeCtlStartAt = &metav1.Time{Time: nc.State.StartedAt.UTC().Truncate(1e9)}
	}
	if o := pool.Spec.Override; o != nil {
		st.Override = &v1alpha1.OverrideStatus{Enabled: ptr.To(o.Enabled), Reason: o.Reason, Source: overrideSourceSpec}
		if o.Enabled {
			at := now
			if old := pool.Status.Override; old != nil && old.Enabled != nil && *old.Enabled && old.OverriddenAt != nil {
				at = *old.OverriddenAt
			}
			st.Override.OverriddenAt = &at
		}
	}
	st.Resize = resizeState(pool.Status.Resize, firstApply, plan, desired)
	if st.Resize != nil && st.Resize.Status != v1alpha1.ResizeCompleted && pool.Status.Resize != nil &&
		pool.Status.Resize.Status == st.Resize.Status && pool.Status.Resize.LastProbeTime != nil {
		st.Resize.LastProbeTime = pool.Status.Resize.LastProbeTime
	} else if st.Resize != nil && st.Resize != pool.Status.Resize {
		st.Resize = st.Resize.DeepCopy()
		st.Resize.LastProbeTime = &now
	}
	st.NodeCtl = &v1alpha1.NodeCtlStatus{Connected: ptr.To(nc.Healthy)}
	if nc.DownSince != nil {
		st.NodeCtl.DownSince = &metav1.Time{Time: nc.DownSince.UTC().Truncate(1e9)}
	}
	allocated := prev.allocated
	if nc.State != nil {
		st.PoolInfo = &v1alpha1.PoolInfo{Zone: nc.State.Zone, AllocatableMemoryBytes: ptr.To(nc.State.AllocatableMemoryBytes)}
		if d := nc.State.AllocatedMemoryBytes - prev.allocated; d >= allocatedStep(nc.State.AllocatableMemoryBytes) ||
			-d >= allocatedStep(nc.State.AllocatableMemoryBytes) || prev.key == "" {
			allocated = nc.State.AllocatedMemoryBytes
		}
		st.PoolInfo.AllocatedMemoryBytes = ptr.To(allocated)
	}
	st.LastAppliedGeneration = pool.Status.LastAppliedGeneration
	if plan.Synced {
		st.LastAppliedGeneration = ptr.To(pool.Generation)
	}
	st.Conditions = a.conditions(pool, pod, nc, plan, nodeCtlErr, shim, shimKnown)

	key, err := statusKey(st)
	if err != nil {
		return err
	}
	if key == prev.key {
		if slices.Contains(prev.own, pool.ResourceVersion) {
			return nil
		}
		// Someone wrote the pool since: rewrite only if the agent's fields are not what
		// it applied (e.g. another writer cleared them).
		if observed, err := statusKey(agentFields(pool.Status)); err != nil || observed == key {
			return err
		}
		logf.FromContext(ctx).Info("the agent's status fields were changed by another writer; applying them again")
	}
	rvBefore := pool.ResourceVersion
	// A write is due: refresh the heartbeats.
	st.PlaceholderAgent.LastHeartbeat = &now
	if nc.Healthy {
		st.NodeCtl.LastHeartbeat = &metav1.Time{Time: nc.LastOK.UTC().Truncate(1e9)}
	}
	if err := a.applyStatus(ctx, pool, st); err != nil {
		return err
	}
	statusWrites.Inc()
	a.mu.Lock()
	own := append(slices.Clone(prev.own), rvBefore, pool.ResourceVersion)
	a.reported[pool.Name] = reportedStatus{key: key, allocated: allocated, own: own[max(0, len(own)-ownVersions):]}
	a.mu.Unlock()
	logf.FromContext(ctx).V(1).Info("status applied")
	return nil
}

// statusKey is the status without heartbeats and transition times, conditions in type
// order: what "a field changed" compares.
func statusKey(st v1alpha1.SandboxPoolStatus) (string, error) {
	k := *st.DeepCopy()
	for i := range k.Conditions {
		k.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	slices.SortFunc(k.Conditions, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	if k.PlaceholderAgent != nil {
		k.PlaceholderAgent.LastHeartbeat = nil
	}
	if k.NodeCtl != nil {
		k.NodeCtl.LastHeartbeat = nil
	}
	if k.Resize != nil {
		k.Resize.LastProbeTime = nil
	}
	if k.Override != nil {
		k.Override.OverriddenAt = nil
	}
	b, err := json.Marshal(k)
	return string(b), err
}

// agentFields is the part of a pool's status the agent owns (SPEC §4), as read back.
func agentFields(s v1alpha1.SandboxPoolStatus) v1alpha1.SandboxPoolStatus {
	own := v1alpha1.SandboxPoolStatus{PlaceholderPod: s.PlaceholderPod, PlaceholderAgent: s.PlaceholderAgent,
		Override: s.Override, Resize: s.Resize, NodeCtl: s.NodeCtl, PoolInfo: s.PoolInfo,
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
func (a *Agent) conditions(pool *v1alpha1.SandboxPool, pod *corev1.Pod, nc nodeCtlView, plan resizePlan,
	nodeCtlErr error, shim shimState, shimKnown bool) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range pool.Status.Conditions {
		if isAgentCondition(c.Type) {
			out = append(out, c)
		}
	}
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&out, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: pool.Generation})
	}

	switch {
	case shimKnown && shim.Started:
		set(v1alpha1.ConditionPlaceholderPodReady, true, ReasonPodStarted, "the placeholder shim started the pod "+shim.PodUID)
	case shimKnown:
		set(v1alpha1.ConditionPlaceholderPodReady, false, ReasonPodNotStarted, "the placeholder shim has not started the pod, or stopped it")
	case pod != nil && podReady(pod):
		// No word from the shim since this agent started (it does not repeat itself): the
		// mirror pod's readiness stands in.
		set(v1alpha1.ConditionPlaceholderPodReady, true, ReasonMirrorPodReady, "the mirror pod "+pod.Name+" is ready")
	default:
		set(v1alpha1.ConditionPlaceholderPodReady, false, ReasonMirrorPodNotReady, "no ready placeholder pod")
	}

	if nc.Healthy {
		set(v1alpha1.ConditionNodeCtlHealthy, true, ReasonNodeCtlHealthy, "node-ctl answers on "+a.opts.NodeCtlSocket)
	} else {
		set(v1alpha1.ConditionNodeCtlHealthy, false, ReasonNodeCtlUnreachable, "node-ctl: "+nc.Err)
	}

	switch {
	case plan.Synced:
		set(v1alpha1.ConditionResourceSynced, true, ReasonSynced, "node-ctl and the placeholder pod run the pool's resources")
	case plan.Deferred:
		set(v1alpha1.ConditionResourceSynced, false, ReasonResizeDeferred, plan.Reason)
	case nodeCtlErr != nil:
		set(v1alpha1.ConditionResourceSynced, false, ReasonNodeCtlRejected, nodeCtlErr.Error())
	case !nc.Healthy:
		set(v1alpha1.ConditionResourceSynced, false, ReasonNodeCtlUnreachable, "node-ctl does not answer")
	case plan.Reason != "":
		set(v1alpha1.ConditionResourceSynced, false, ReasonWaitingForPod, plan.Reason)
	default:
		set(v1alpha1.ConditionResourceSynced, false, ReasonResizing, "moving node-ctl and the placeholder pod to the pool's resources")
	}

	inProgress := !plan.Synced && !plan.Deferred
	reason := ReasonNoResize
	if inProgress {
		reason = ReasonResizeInProgress
	}
	set(v1alpha1.ConditionResizeInProgress, inProgress, reason, fmt.Sprintf("requests %s cpu, %s memory", plan.Manifest.Cpu(), plan.Manifest.Memory()))
	if plan.Deferred {
		set(v1alpha1.ConditionResizeDeferred, true, ReasonResizeDeferred, plan.Reason)
	} else {
		set(v1alpha1.ConditionResizeDeferred, false, ReasonNoResize, "no downscale is waiting")
	}
	return out
}

func isAgentCondition(t string) bool {
	switch t {
	case v1alpha1.ConditionPlaceholderPodReady, v1alpha1.ConditionResourceSynced, v1alpha1.ConditionNodeCtlHealthy,
		v1alpha1.ConditionResizeInProgress, v1alpha1.ConditionResizeDeferred:
		return true
	}
	return false
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// applyStatus server-side applies the agent's fields. Never forced: a conflict is retried
// on the next pass (SPEC §4).
func (a *Agent) applyStatus(ctx context.Context, pool *v1alpha1.SandboxPool, st v1alpha1.SandboxPoolStatus) error {
	patch, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.KindSandboxPool,
		"metadata":   map[string]any{"name": pool.Name},
		"status":     st,
	})
	if err != nil {
		return err
	}
	if err := a.client.Status().Patch(ctx, pool, client.RawPatch(types.ApplyPatchType, patch),
		client.FieldOwner(v1alpha1.FieldManagerAgent)); err != nil {
		return fmt.Errorf("applying status of %s: %w", pool.Name, err)
	}
	return nil
}
