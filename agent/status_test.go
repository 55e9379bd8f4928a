package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func TestOverrideStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	enabled := &v1alpha1.Override{Enabled: ptr.To(true), Reason: "OPS-1"}
	disabled := &v1alpha1.Override{Enabled: ptr.To(false), Reason: "OPS-1"}
	for _, tc := range []struct {
		name   string
		spec   *v1alpha1.Override
		prev   *v1alpha1.OverrideStatus
		source v1alpha1.OverrideSource
		at     *metav1.Time
	}{
		{"no override", nil, nil, "", nil},
		{"enabled now", enabled, nil, v1alpha1.OverrideSourceOverride, &now},
		{"enabled since earlier", enabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(true), OverriddenAt: &earlier}, v1alpha1.OverrideSourceOverride, &earlier},
		{"enabled again after disabled", enabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(false), OverriddenAt: &earlier}, v1alpha1.OverrideSourceOverride, &now},
		{"disabled", disabled, &v1alpha1.OverrideStatus{Enabled: ptr.To(true), OverriddenAt: &earlier}, v1alpha1.OverrideSourceClass, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := overrideStatus(tc.spec, tc.prev, now)
			if tc.spec == nil {
				if got != nil {
					t.Fatalf("status.override = %+v, want none", got)
				}
				return
			}
			if got.Source != tc.source || *got.Enabled != *tc.spec.Enabled || got.Reason != tc.spec.Reason {
				t.Errorf("status.override = source %q enabled %v reason %q, want %q %v %q", got.Source, *got.Enabled, got.Reason, tc.source, *tc.spec.Enabled, tc.spec.Reason)
			}
			if (got.OverriddenAt == nil) != (tc.at == nil) || (tc.at != nil && !got.OverriddenAt.Equal(tc.at)) {
				t.Errorf("overriddenAt = %v, want %v", got.OverriddenAt, tc.at)
			}
		})
	}
}

// TestPoolCapacity: status.capacity shows the lock (what kubelet admitted, summed over the
// pieces) and the memory in use rounded up to a mebibyte; no node-ctl report, no usage.
func TestPoolCapacity(t *testing.T) {
	held := corev1.ResourceList{}
	lock.AddTo(held, rl("500m", "128Mi"))
	lock.AddTo(held, rl("200m", "64Mi"))
	c := poolCapacity(held, &v1alpha1.PoolInfo{AllocatableMemoryBytes: ptr.To[int64](192 << 20), AllocatedMemoryBytes: ptr.To[int64](13_000_000)})
	if got := [3]string{c.CPU.String(), c.Memory.String(), c.AllocatedMemory.String()}; got != [3]string{"700m", "192Mi", "13Mi"} {
		t.Errorf("capacity = %v, want 700m 192Mi 13Mi", got)
	}
	c = poolCapacity(corev1.ResourceList{}, nil)
	if c.CPU.String() != "0" || c.Memory.String() != "0" || c.AllocatedMemory != nil {
		t.Errorf("capacity with no admitted piece and no node-ctl report = %+v", c)
	}
}

func TestOnItsWay(t *testing.T) {
	created := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	cond := func(typ v1alpha1.ConditionType, s metav1.ConditionStatus, reason v1alpha1.ConditionReason) metav1.Condition {
		return metav1.Condition{Type: typ.String(), Status: s, Reason: reason.String()}
	}
	starting := []metav1.Condition{
		cond(v1alpha1.ConditionPlaceholderPodReady, metav1.ConditionFalse, v1alpha1.ReasonPodNotRunning),
		cond(v1alpha1.ConditionNodeCtlHealthy, metav1.ConditionTrue, v1alpha1.ReasonNodeCtlHealthy),
		cond(v1alpha1.ConditionResourceSynced, metav1.ConditionFalse, v1alpha1.ReasonWaitingForKubelet),
		cond(v1alpha1.ConditionResizeDeferred, metav1.ConditionFalse, v1alpha1.ReasonNoResize),
	}
	with := func(c metav1.Condition) []metav1.Condition {
		out := append([]metav1.Condition(nil), starting...)
		for i := range out {
			if out[i].Type == c.Type {
				out[i] = c
			}
		}
		return out
	}
	pool := func(conds ...metav1.Condition) *v1alpha1.SandboxPool {
		p := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		p.Status.Conditions = conds
		return p
	}
	reported := reportedStatus{applied: &v1alpha1.SandboxPoolStatus{}}
	for _, c := range []struct {
		name  string
		pool  *v1alpha1.SandboxPool
		prev  reportedStatus
		conds []metav1.Condition
		at    time.Duration
		want  bool
	}{
		{"a new pool whose pod has not started: wait", pool(), reportedStatus{}, starting, time.Second, true},
		{"its pod runs: report", pool(), reportedStatus{}, with(cond(v1alpha1.ConditionPlaceholderPodReady, metav1.ConditionTrue, v1alpha1.ReasonPodsRunning)), time.Second, false},
		{"kubelet refused the pod: report", pool(), reportedStatus{}, with(cond(v1alpha1.ConditionPlaceholderPodReady, metav1.ConditionFalse, v1alpha1.ReasonPodRejected)), time.Second, false},
		{"node-ctl does not answer: report", pool(), reportedStatus{}, with(cond(v1alpha1.ConditionNodeCtlHealthy, metav1.ConditionFalse, v1alpha1.ReasonNodeCtlUnreachable)), time.Second, false},
		{"a resize waits for room: report", pool(), reportedStatus{}, with(cond(v1alpha1.ConditionResizeDeferred, metav1.ConditionTrue, v1alpha1.ReasonResizeDeferred)), time.Second, false},
		{"past the grace: report", pool(), reportedStatus{}, starting, firstReportGrace, false},
		{"this agent reported the pool before: report", pool(), reported, starting, time.Second, false},
		{"an agent reported the pool before (a restart): report", pool(starting[0]), reportedStatus{}, starting, time.Second, false},
	} {
		st := &v1alpha1.SandboxPoolStatus{Conditions: c.conds}
		if got := onItsWay(c.pool, c.prev, st, created.Add(c.at)); got != c.want {
			t.Errorf("%s: onItsWay = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMidResize(t *testing.T) {
	cond := func(typ v1alpha1.ConditionType, s metav1.ConditionStatus, reason v1alpha1.ConditionReason) metav1.Condition {
		return metav1.Condition{Type: typ.String(), Status: s, Reason: reason.String()}
	}
	two, three := resource.MustParse("2"), resource.MustParse("3")
	moving := func(cpu resource.Quantity, change ...metav1.Condition) *v1alpha1.SandboxPoolStatus {
		conds := []metav1.Condition{
			cond(v1alpha1.ConditionResizeInProgress, metav1.ConditionTrue, v1alpha1.ReasonResizeInProgress),
			cond(v1alpha1.ConditionPlaceholderPodReady, metav1.ConditionTrue, v1alpha1.ReasonPodsRunning),
			cond(v1alpha1.ConditionNodeCtlHealthy, metav1.ConditionTrue, v1alpha1.ReasonNodeCtlHealthy),
			cond(v1alpha1.ConditionResizeDeferred, metav1.ConditionFalse, v1alpha1.ReasonNoResize),
			cond(v1alpha1.ConditionResourceSynced, metav1.ConditionFalse, v1alpha1.ReasonWaitingForKubelet),
		}
		for _, c := range change {
			meta.SetStatusCondition(&conds, c)
		}
		return &v1alpha1.SandboxPoolStatus{Conditions: conds,
			Resize: v1alpha1.ResizeStatus{Status: v1alpha1.ResizeInProgress, RequestedCPU: &cpu}}
	}
	done := moving(two, cond(v1alpha1.ConditionResizeInProgress, metav1.ConditionFalse, v1alpha1.ReasonNoResize),
		cond(v1alpha1.ConditionResourceSynced, metav1.ConditionTrue, v1alpha1.ReasonSynced))
	done.Resize.Status = v1alpha1.ResizeCompleted
	for _, c := range []struct {
		name      string
		shown, st *v1alpha1.SandboxPoolStatus
		want      bool
	}{
		{"a step of a resize that moves: not written", moving(two), moving(two, cond(v1alpha1.ConditionResourceSynced, metav1.ConditionFalse, v1alpha1.ReasonResizing)), true},
		{"the resize starts: written", &v1alpha1.SandboxPoolStatus{}, moving(two), false},
		{"it ends: written", moving(two), done, false},
		{"a new target mid-resize: written", moving(two), moving(three), false},
		{"a placeholder pod broke: written", moving(two), moving(two, cond(v1alpha1.ConditionPlaceholderPodReady, metav1.ConditionFalse, v1alpha1.ReasonShimExited)), false},
		{"node-ctl refused: written", moving(two), moving(two, cond(v1alpha1.ConditionResourceSynced, metav1.ConditionFalse, v1alpha1.ReasonNodeCtlRejected)), false},
		{"deferred: written", moving(two), moving(two, cond(v1alpha1.ConditionResizeDeferred, metav1.ConditionTrue, v1alpha1.ReasonResizeDeferred)), false},
		{"nothing written before: written", nil, moving(two), false},
	} {
		if got := midResize(c.shown, c.st); got != c.want {
			t.Errorf("%s: midResize = %v, want %v", c.name, got, c.want)
		}
	}
}
