package policy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/agentcube/sandboxpool/bundles"
	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestRegoNamesMatchGo: the names the policy shares with the Go code (condition types,
// markers) are declared in schema/v1alpha1 and restated once in the bundle's lib/names;
// this fails when the two drift apart.
func TestRegoNamesMatchGo(t *testing.T) {
	b, err := policy.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rego.New(rego.Query("data.sandboxpool.lib.names"), rego.ParsedBundle(bundles.Root, b),
		rego.SetRegoVersion(ast.RegoV1)).Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("evaluating data.sandboxpool.lib.names: %v (%d results)", err, len(rs))
	}
	names := rs[0].Expressions[0].Value.(map[string]any)
	set := func(key string) []string {
		var out []string
		for _, v := range names[key].([]any) {
			out = append(out, v.(string))
		}
		slices.Sort(out)
		return out
	}
	var want []string
	for _, c := range v1alpha1.ControllerConditions {
		want = append(want, c.String())
	}
	if got := set("controller_conditions"); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("controller_conditions = %q, Go has %q", got, want)
	}
	if got := set("controller_status_fields"); !slices.Equal(got, []string{"phase"}) {
		t.Errorf("controller_status_fields = %q, want [phase] (the controller writes status.phase and its conditions)", got)
	}
	for key, want := range map[string]string{
		"ever_ready":  v1alpha1.AnnotationEverReady,
		"class_label": v1alpha1.LabelClass,
		"node_label":  v1alpha1.LabelNode,

		"controller_field_manager": v1alpha1.FieldManagerController,
		"agent_field_manager":      v1alpha1.FieldManagerAgent,

		"runtime_handler": v1alpha1.PlaceholderRuntimeHandler,
	} {
		if names[key] != want {
			t.Errorf("%s = %v, Go has %q", key, names[key], want)
		}
	}
	// The pool name's parts (naming.PoolName); the rule's result is compared with
	// naming.PoolName in TestEvaluate.
	if got := names["pool_name_prefix"]; got != naming.PoolNamePrefix {
		t.Errorf("pool_name_prefix = %v, Go has %q", got, naming.PoolNamePrefix)
	}
	if got := fmt.Sprint(names["max_unhashed_node_name"]); got != fmt.Sprint(naming.MaxUnhashedNodeNameLength) {
		t.Errorf("max_unhashed_node_name = %v, Go has %d", got, naming.MaxUnhashedNodeNameLength)
	}
}
