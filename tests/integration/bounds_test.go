package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// TestStatusIsBounded: a pool's status holds the pool's condition types and nothing else, and
// every string in it has a bound, so what a node can store in its pool's status (the one
// object a node may write) is bounded. The writes are server-side applies of the status
// under the agent's field manager, as a node's agent makes them; the CRD schema refuses
// them before any admission webhook is called, so this holds whoever writes and with the
// webhook down.
func TestStatusIsBounded(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	pools := dyn(t).Resource(poolsGVR)
	u := fromYAML(t, poolYAML("bounded-node", "c"))
	if _, err := pools.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pools.Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
	apply := func(status map[string]any) error {
		_, err := pools.ApplyStatus(ctx, u.GetName(), framework.PoolStatus(u.GetName(), status),
			metav1.ApplyOptions{FieldManager: v1alpha1.FieldManagerAgent, Force: true})
		return err
	}
	cond := func(typ, message string) map[string]any {
		c := framework.Condition(typ, "True", "Probe")
		c["message"] = message
		return c
	}

	// Thousands of made-up conditions, over a megabyte: the flood a node could write before.
	var flood []any
	for i := range 2000 {
		flood = append(flood, cond(fmt.Sprintf("MadeUp%04d", i), strings.Repeat("x", 400)))
	}
	refused := []struct {
		what   string
		status map[string]any
		says   string
	}{
		{"2000 made-up conditions (1.1 MB)", map[string]any{"conditions": flood}, "status.conditions: Too many: 2000: must have at most 7 items"},
		{"one made-up condition type", map[string]any{"conditions": []any{cond("MadeUp", "")}},
			`status.conditions[0].type: Unsupported value: "MadeUp"`},
		{"a condition message over Kubernetes' 32768 characters", map[string]any{"conditions": []any{
			cond(v1alpha1.ConditionNodeCtlHealthy.String(), strings.Repeat("x", 32769))}}, "status.conditions[0].message: Too long"},
		{"a megabyte agent version", map[string]any{"placeholderAgent": map[string]any{"version": strings.Repeat("v", 1<<20)}},
			"status.placeholderAgent.version: Too long"},
		{"a megabyte zone", map[string]any{"poolInfo": map[string]any{"zone": strings.Repeat("z", 1<<20)}}, "status.poolInfo.zone: Too long"},
		{"a timestamp with a megabyte of fraction", map[string]any{"nodeCtl": map[string]any{
			"lastHeartbeat": "2026-11-29T10:00:00." + strings.Repeat("1", 1<<20) + "Z"}}, "status.nodeCtl.lastHeartbeat: Too long"},
	}
	for _, tc := range refused {
		err := apply(tc.status)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.what)
		case !apierrors.IsInvalid(err):
			t.Errorf("%s: refused, but not by the schema: %v", tc.what, firstLine(err))
		case !strings.Contains(err.Error(), tc.says):
			t.Errorf("%s: the refusal does not say %q: %v", tc.what, tc.says, firstLine(err))
		}
	}

	// The most a node can store: every condition type of a pool once, each with the longest
	// reason and message, is admitted, and that is all the conditions can hold.
	var most []any
	for _, typ := range slices.Concat(v1alpha1.AgentConditions, v1alpha1.ControllerConditions) {
		c := cond(typ.String(), strings.Repeat("x", 32768))
		c["reason"] = "R" + strings.Repeat("r", 1023)
		most = append(most, c)
	}
	if err := apply(map[string]any{"conditions": most}); err != nil {
		t.Fatalf("the largest valid conditions refused: %v", firstLine(err))
	}
	got, err := pools.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	b, err := json.Marshal(conds)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 256 << 10
	if len(conds) != len(most) || len(b) > limit {
		t.Errorf("the largest valid conditions: %d stored in %d bytes, want %d in at most %d", len(conds), len(b), len(most), limit)
	}
	t.Logf("the largest conditions a pool's status can hold: %d entries, %d bytes", len(conds), len(b))
}

// TestClassStatusConditionsAreKnown: a class's status holds the class's condition types only.
func TestClassStatusConditionsAreKnown(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	classes := dyn(t).Resource(poolsGVR.GroupVersion().WithResource(v1alpha1.ResourceSandboxPoolClasses))
	u := fromYAML(t, classYAML("bounded-class"))
	created, err := classes.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes.Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
	created.Object["status"] = map[string]any{"conditions": []any{
		framework.Condition(v1alpha1.ConditionNodeConflict.String(), "False", "NoConflict"),
		framework.Condition(v1alpha1.ConditionPlaceholderPodReady.String(), "True", "Probe"), // a pool's type
	}}
	_, err = classes.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if want := `status.conditions[1].type: Unsupported value: "PlaceholderPodReady"`; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("a pool's condition type in a class's status: %v, want refused saying %q", firstLine(err), want)
	}
}

// firstLine is the start of err's message: refusals of large objects quote them.
func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s[:min(len(s), 600)]
}
