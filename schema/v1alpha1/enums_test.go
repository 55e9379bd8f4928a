package v1alpha1_test

import (
	"encoding/json"
	"slices"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/crdgen"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestEnumsMatchSchema: the Go constants of each enum of the API are exactly the values its
// CRD admits, so the CUE schema (which the CRD is generated from) and the constants the
// code writes name the same set. A condition type the code adds without the schema would
// be refused by the API server; one the schema adds without a constant is one no
// component writes.
func TestEnumsMatchSchema(t *testing.T) {
	crds, err := crdgen.Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	root := map[string]apiextv1.JSONSchemaProps{}
	for _, crd := range crds {
		root[crd.Spec.Names.Kind] = *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	strs := func(vs ...string) []string { return vs }
	for _, tc := range []struct {
		kind string
		path []string // properties, "[]" for a list's items
		want []string
	}{
		{v1alpha1.KindSandboxPool, []string{"status", "conditions", "[]", "type"},
			conditionTypes(slices.Concat(v1alpha1.AgentConditions, v1alpha1.ControllerConditions))},
		{v1alpha1.KindSandboxPoolClass, []string{"status", "conditions", "[]", "type"}, conditionTypes(v1alpha1.ClassConditions)},
		{v1alpha1.KindSandboxPool, []string{"status", "phase"}, strs(string(v1alpha1.PhasePending), string(v1alpha1.PhaseReady),
			string(v1alpha1.PhaseDegraded), string(v1alpha1.PhaseUnready))},
		{v1alpha1.KindSandboxPool, []string{"status", "resize", "status"}, strs(string(v1alpha1.ResizeInProgress),
			string(v1alpha1.ResizeCompleted), string(v1alpha1.ResizeDeferred))},
		{v1alpha1.KindSandboxPool, []string{"status", "override", "source"}, strs(string(v1alpha1.OverrideSourceClass),
			string(v1alpha1.OverrideSourceOverride))},
	} {
		s := root[tc.kind]
		for _, p := range tc.path {
			if p == "[]" {
				s = *s.Items.Schema
				continue
			}
			s = s.Properties[p]
		}
		var got []string
		for _, e := range s.Enum {
			var v string
			if err := json.Unmarshal(e.Raw, &v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: the CRD admits %q, the Go constants are %q", tc.kind, tc.path, got, tc.want)
		}
	}
}

func conditionTypes(ts []v1alpha1.ConditionType) []string {
	out := make([]string, len(ts))
	for i, c := range ts {
		out[i] = c.String()
	}
	return out
}
