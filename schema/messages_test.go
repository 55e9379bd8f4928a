package schema_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema"
)

// TestMessagesForEveryKindOfRule: the rules the corpus cannot show in a file of reasonable
// size, and one of each kind it does, each worded as the API server words its own: one
// line naming the field, its value and what is allowed.
func TestMessagesForEveryKindOfRule(t *testing.T) {
	s := mustSchema(t)
	pool := func(spec, status string) string {
		return `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool","metadata":{"name":"placeholder-n"},
			"spec":{"classRef":{"name":"c"},"nodeName":"n","resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}` + spec + `},"status":` + status + `}`
	}
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	for _, tc := range []struct {
		name, obj, want string
	}{
		{"too long", pool("", `{"placeholderPod":{"name":"`+strings.Repeat("a", 254)+`"}}`),
			"status.placeholderPod.name: Too long: may not be more than 253 characters"},
		{"wrong JSON type", pool("", `{"nodeCtl":{"connected":"yes"}}`),
			`status.nodeCtl.connected: Invalid value: "yes": must be of type boolean`},
		{"wrong JSON type of a number", pool("", `{"poolInfo":{"allocatedMemoryBytes":"12"}}`),
			`status.poolInfo.allocatedMemoryBytes: Invalid value: "12": must be of type integer`},
		{"enum given a number", pool("", `{"phase":3}`),
			`status.phase: Unsupported value: 3: supported values: "Pending", "Ready", "Degraded", "Unready"`},
		{"enum of a toleration operator", pool(`,"placeholderPod":{"tolerations":[{"operator":"Like"}]}`, `{}`),
			`spec.placeholderPod.tolerations[0].operator: Unsupported value: "Like": supported values: "Exists", "Equal", "Lt", "Gt"`},
		{"time in words", pool("", `{"nodeCtl":{"downSince":"yesterday"}}`),
			`status.nodeCtl.downSince: Invalid value: "yesterday": must be an RFC 3339 time such as "2026-11-29T10:00:00Z"`},
		{"unknown field", pool("", `{"nodeCtl":{"up":true}}`),
			"status.nodeCtl.up: Forbidden: field not declared in the schema"},
		{"quantity in the status", pool("", `{"capacity":{"cpu":"-1"}}`),
			`status.capacity.cpu: Invalid value: "-1": must be a quantity of zero or more: a whole number or a string such as "2Mi"`},
	} {
		if tc.want == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(schema.KindSandboxPool, []byte(tc.obj))
			ve, ok := errors.AsType[*schema.ValidationError](err)
			if !ok {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			var got []string
			for _, f := range ve.Fields {
				got = append(got, f.String())
			}
			if strings.Join(got, "\n") != tc.want {
				t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), tc.want)
			}
		})
	}

	// A quota of more than 32 resources, and a selector requirement with more than 256
	// values: counted, as the API server counts them.
	resources := many(33, func(i int) string { return fmt.Sprintf(`"example.com/r%d":"1"`, i) })
	class := `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPoolClass","metadata":{"name":"c"},
		"spec":{"selector":{"matchExpressions":[{"key":"a","operator":"In","values":[` + many(257, func(i int) string { return fmt.Sprintf(`"v%d"`, i) }) + `]}]},
		"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi",` + resources + `}}}}`
	err := s.Validate(schema.KindSandboxPoolClass, []byte(class))
	ve, ok := errors.AsType[*schema.ValidationError](err)
	if !ok {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	var got []string
	for _, f := range ve.Fields {
		got = append(got, f.String())
	}
	want := []string{
		"spec.selector.matchExpressions[0].values: Too many: 257: must have at most 256 items",
		"spec.resourcePolicy.resources: Too many: 35: must have at most 32 items",
	}
	for _, w := range want {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("missing %q in:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d field errors, want %d:\n  %s", len(got), len(want), strings.Join(got, "\n  "))
	}
}
