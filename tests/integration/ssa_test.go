package integration

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

func conditionsOf(t *testing.T, u *unstructured.Unstructured) map[string]string {
	t.Helper()
	list, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range list {
		m := c.(map[string]any)
		out[m["type"].(string)] = m["status"].(string)
	}
	return out
}

// managedConditions lists the condition types a field manager owns in status.
func managedConditions(u *unstructured.Unstructured, manager string) string {
	var owned []string
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != manager || mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		raw := mf.FieldsV1.GetRawString()
		for _, typ := range []string{
			v1alpha1.ConditionPlaceholderPodReady.String(), v1alpha1.ConditionNodeCtlHealthy.String(),
			v1alpha1.ConditionPlaceholderAgentHealthy.String(), v1alpha1.ConditionNodeNotFound.String(),
		} {
			if strings.Contains(raw, `k:{\"type\":\"`+typ+`\"}`) {
				owned = append(owned, typ)
			}
		}
		if strings.Contains(raw, `"f:phase"`) {
			owned = append(owned, "phase")
		}
	}
	return strings.Join(owned, ",")
}

// TestTwoFieldManagersOwnTheirConditions proves docs/design.md §4 on the real API server: the agent
// and the controller apply their own condition entries of one map list without conflict
// or loss, a write into the other's field is a conflict, and an unchanged apply writes
// nothing.
func TestTwoFieldManagersOwnTheirConditions(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	pools := dyn(t).Resource(poolsGVR)
	const name = "placeholder-ssa-node"
	if _, err := pools.Create(ctx, fromYAML(t, poolYAML("ssa-node", "c")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(ctx, name, metav1.DeleteOptions{}) })
	agent := metav1.ApplyOptions{FieldManager: v1alpha1.FieldManagerAgent}
	controller := metav1.ApplyOptions{FieldManager: v1alpha1.FieldManagerController}

	agentStatus := func(podReady string) map[string]any {
		return map[string]any{
			"poolInfo": map[string]any{"zone": "zone-a"},
			"conditions": []any{
				framework.Condition(v1alpha1.ConditionPlaceholderPodReady.String(), podReady, "Probe"),
				framework.Condition(v1alpha1.ConditionNodeCtlHealthy.String(), "True", "Probe"),
			},
		}
	}
	controllerStatus := map[string]any{
		"phase": string(v1alpha1.PhaseReady),
		"conditions": []any{
			framework.Condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True", "LeaseRenewed"),
			framework.Condition(v1alpha1.ConditionNodeNotFound.String(), "False", "NodeExists"),
		},
	}
	if _, err := pools.ApplyStatus(ctx, name, framework.PoolStatus(name, agentStatus("True")), agent); err != nil {
		t.Fatalf("agent apply: %v", err)
	}
	got, err := pools.ApplyStatus(ctx, name, framework.PoolStatus(name, controllerStatus), controller)
	if err != nil {
		t.Fatalf("controller apply: %v", err)
	}
	if c := conditionsOf(t, got); len(c) != 4 {
		t.Fatalf("want the 4 conditions of both writers, got %v", c)
	}
	if m := managedConditions(got, v1alpha1.FieldManagerAgent); m != "PlaceholderPodReady,NodeCtlHealthy" {
		t.Errorf("agent owns %q", m)
	}
	if m := managedConditions(got, v1alpha1.FieldManagerController); m != "PlaceholderAgentHealthy,NodeNotFound,phase" {
		t.Errorf("controller owns %q", m)
	}

	// The agent changes its own entry: the controller's entries and phase stay.
	got, err = pools.ApplyStatus(ctx, name, framework.PoolStatus(name, agentStatus("False")), agent)
	if err != nil {
		t.Fatal(err)
	}
	c := conditionsOf(t, got)
	if c[v1alpha1.ConditionPlaceholderPodReady.String()] != "False" || c[v1alpha1.ConditionPlaceholderAgentHealthy.String()] != "True" ||
		c[v1alpha1.ConditionNodeNotFound.String()] != "False" || len(c) != 4 {
		t.Errorf("after the agent's update: %v", c)
	}
	if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("phase lost: %q", phase)
	}

	// Writing the other owner's field is a conflict that names the owner; nothing changes.
	intrude := agentStatus("False")
	intrude["phase"] = string(v1alpha1.PhaseDegraded)
	_, err = pools.ApplyStatus(ctx, name, framework.PoolStatus(name, intrude), agent)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), v1alpha1.FieldManagerController) {
		t.Errorf("agent writing phase: want a conflict naming %s, got %v", v1alpha1.FieldManagerController, err)
	}
	intrudeCond := agentStatus("False")
	intrudeCond["conditions"] = append(intrudeCond["conditions"].([]any),
		framework.Condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "False", "Forged"))
	if _, err = pools.ApplyStatus(ctx, name, framework.PoolStatus(name, intrudeCond), agent); !apierrors.IsConflict(err) {
		t.Errorf("agent writing the controller's condition: want a conflict, got %v", err)
	}

	// An unchanged apply does not write.
	before, err := pools.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := pools.ApplyStatus(ctx, name, framework.PoolStatus(name, controllerStatus), controller)
	if err != nil {
		t.Fatal(err)
	}
	if before.GetResourceVersion() != after.GetResourceVersion() {
		t.Errorf("no-op apply wrote: resourceVersion %s → %s", before.GetResourceVersion(), after.GetResourceVersion())
	}

	// The controller drops one of its own entries: only that entry goes.
	got, err = pools.ApplyStatus(ctx, name, framework.PoolStatus(name, map[string]any{
		"phase":      string(v1alpha1.PhaseReady),
		"conditions": []any{framework.Condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True", "LeaseRenewed")},
	}), controller)
	if err != nil {
		t.Fatal(err)
	}
	c = conditionsOf(t, got)
	if _, ok := c[v1alpha1.ConditionNodeNotFound.String()]; ok || len(c) != 3 {
		t.Errorf("after the controller dropped NodeNotFound: %v", c)
	}
}
