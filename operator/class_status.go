package operator

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/internal/ssa"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// maxConflictsInMessage bounds the NodeConflict condition message.
const maxConflictsInMessage = 5

// updateStatus computes the class's whole status (counts, capacity, conditions), sets the
// class's and its pools' metrics, and applies the status (field manager
// sandboxpool-controller) when it differs from what the class shows.
func (r *ClassReconciler) updateStatus(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool, res syncResult, syncErr error) error {
	want := v1alpha1.SandboxPoolClassStatus{ObservedGeneration: class.Generation}
	counts := poolCounts{byPhase: map[v1alpha1.SandboxPoolPhase]int{}}
	figures := make([]poolFigures, 0, len(ours))
	var ready int32
	byPool := make(map[string]poolFigures, len(ours))
	for _, p := range ours {
		f := figuresOf(p)
		figures = append(figures, f)
		byPool[p.Name] = f
		counts.byPhase[p.Status.Phase]++
		if p.Status.Phase == v1alpha1.PhaseReady {
			ready++
		}
		if resizeDeferred(p) {
			counts.resizeDeferred++
		}
		if meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionPlaceholderAgentHealthy.String()) {
			counts.heartbeatStale++
		}
	}
	pools := int32(len(ours))
	want.TotalSandboxPools, want.ReadySandboxPools, want.NotReadySandboxPools = ptr.To(pools), ptr.To(ready), ptr.To(pools-ready)
	setPoolMetrics(class.Name, counts)
	var total poolFigures
	want.Capacity, total = classCapacity(figures)
	setCapacityMetrics(class.Name, total, byPool, r.classes.swapPoolSeries(class.Name, byPool))

	want.Conditions = append([]metav1.Condition(nil), class.Status.Conditions...)
	conflict := metav1.Condition{Type: v1alpha1.ConditionNodeConflict.String(), ObservedGeneration: class.Generation,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoConflict.String(), Message: "no selected node has a pool of another class"}
	if cs := res.plan.conflicts; len(cs) > 0 {
		conflict.Status, conflict.Reason, conflict.Message = metav1.ConditionTrue, v1alpha1.ReasonNodeConflict.String(), conflictMessage(cs)
	}
	meta.SetStatusCondition(&want.Conditions, conflict)
	synced := metav1.Condition{Type: v1alpha1.ConditionPoolsSynced.String(), ObservedGeneration: class.Generation,
		Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllPoolsSynced.String(), Message: "every selected node has a pool with the class's policy"}
	switch {
	case syncErr != nil:
		synced.Status, synced.Reason, synced.Message = metav1.ConditionFalse, res.reason.String(), syncErr.Error()
	case res.more:
		synced.Status, synced.Reason = metav1.ConditionFalse, v1alpha1.ReasonProgressing.String()
		synced.Message = fmt.Sprintf("%d nodes still need a pool", len(res.plan.create)-r.burst())
	}
	meta.SetStatusCondition(&want.Conditions, synced)

	if !ssa.StatusChanged(&class.Status, &want) {
		return nil
	}
	return ssa.ApplyStatus(ctx, r.Client, class, &want, v1alpha1.FieldManagerController)
}

// conflictMessage names the winning class of each conflicting node (the first few).
func conflictMessage(cs []nodeConflict) string {
	var b strings.Builder
	for i, c := range cs {
		if i == maxConflictsInMessage {
			fmt.Fprintf(&b, "; and %d more nodes", len(cs)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s is owned by class %s (pool %s)", c.Node, c.Class, c.Pool)
	}
	return b.String()
}
