package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// storedPool is the golden pool as an older, looser schema could have stored it: a bare
// numeric priority (now refused) and a condition whose reason breaks today's pattern.
func storedPool(t *testing.T) map[string]any {
	t.Helper()
	o, err := corpus.Find("pool-full-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatal(err)
	}
	pod := m["spec"].(map[string]any)["placeholderPod"].(map[string]any)
	delete(pod, "priorityClassName")
	conds := m["status"].(map[string]any)["conditions"].([]any)
	conds[len(conds)-1].(map[string]any)["reason"] = "lease renewed" // spaces: not a reason
	return m
}

func clone(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func at(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

func TestValidateUpdateRatchets(t *testing.T) {
	s := mustSchema(t)
	stored := storedPool(t)
	// The stored object breaks today's rules: a CREATE of it is refused.
	raw, _ := json.Marshal(stored)
	if err := s.Validate(schema.KindSandboxPool, raw); err == nil {
		t.Fatal("the stored pool passes today's schema; the test needs one that does not")
	}

	for _, tc := range []struct {
		name   string
		update func(m map[string]any)
		want   []string // the fields of the violations left; none: valid
	}{
		{"no change", func(map[string]any) {}, nil},
		{"server-written metadata only", func(m map[string]any) {
			at(m, "metadata")["resourceVersion"] = "42"
			at(m, "metadata")["generation"] = float64(3)
		}, nil},
		{"status write by the agent", func(m map[string]any) {
			at(m, "status", "poolInfo")["allocatedMemoryBytes"] = float64(1 << 30)
		}, nil},
		{"status write that adds a condition before the stored invalid one", func(m map[string]any) {
			st := at(m, "status")
			st["conditions"] = append([]any{map[string]any{"type": "ResourceSynced", "status": "True",
				"lastTransitionTime": "2026-11-29T10:00:00Z", "reason": "Synced", "message": "ok"}}, st["conditions"].([]any)...)
		}, nil},
		{"status write of an invalid phase", func(m map[string]any) {
			at(m, "status")["phase"] = "Running"
		}, []string{"status.phase"}},
		{"status write that changes the invalid condition's message only", func(m map[string]any) {
			conds := at(m, "status")["conditions"].([]any)
			conds[len(conds)-1].(map[string]any)["message"] = "changed"
		}, nil},
		{"status write that changes the invalid reason to another invalid one", func(m map[string]any) {
			conds := at(m, "status")["conditions"].([]any)
			conds[len(conds)-1].(map[string]any)["reason"] = "still not a reason"
		}, []string{"status.conditions[3].reason"}},
		{"status write of an unknown field", func(m map[string]any) {
			at(m, "status")["forged"] = true
		}, []string{"status.forged"}},
		{"status write without the required resize.status", func(m map[string]any) {
			delete(at(m, "status", "resize"), "status")
		}, []string{"status.resize.status"}},
		{"finalizer removal", func(m map[string]any) {
			at(m, "metadata")["finalizers"] = []any{}
		}, nil},
		{"metadata write of an invalid label", func(m map[string]any) {
			at(m, "metadata", "labels")["bad key!"] = "x"
		}, []string{"metadata.labels"}},
		{"override edit", func(m map[string]any) {
			at(m, "spec")["override"] = map[string]any{"enabled": true, "reason": "OPS-1",
				"resourcePolicy": map[string]any{"resources": map[string]any{"cpu": "6", "memory": "12Gi"}}}
		}, nil},
		{"override enabled without a reason", func(m map[string]any) {
			at(m, "spec", "override")["enabled"] = true
			at(m, "spec", "override")["resourcePolicy"] = map[string]any{"resources": map[string]any{"cpu": "6", "memory": "12Gi"}}
		}, []string{"spec.override.reason"}},
		{"a change to the invalid part, still invalid", func(m map[string]any) {
			at(m, "spec", "placeholderPod")["priority"] = float64(7)
		}, []string{"spec.placeholderPod.priorityClassName"}},
		{"the invalid part fixed", func(m map[string]any) {
			at(m, "spec", "placeholderPod")["priorityClassName"] = "system-node-critical"
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := clone(t, stored)
			tc.update(updated)
			newRaw, _ := json.Marshal(updated)
			err := s.ValidateUpdate(schema.KindSandboxPool, raw, newRaw)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError naming %v, got %v", tc.want, err)
			}
			var got []string
			for _, f := range ve.Fields {
				got = append(got, f.Path)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("violations %v, want fields %v", ve.Fields, tc.want)
			}
		})
	}
}

func TestChangedParts(t *testing.T) {
	old := map[string]any{"metadata": map[string]any{"name": "a", "resourceVersion": "1"}, "spec": map[string]any{"x": 1}}
	for _, tc := range []struct {
		obj  map[string]any
		want string
	}{
		{map[string]any{"metadata": map[string]any{"name": "a", "resourceVersion": "2", "managedFields": []any{}}, "spec": map[string]any{"x": 1}}, ""},
		{map[string]any{"metadata": map[string]any{"name": "a", "labels": map[string]any{"l": "v"}}, "spec": map[string]any{"x": 1}}, "metadata"},
		{map[string]any{"metadata": map[string]any{"name": "a"}, "spec": map[string]any{"x": 2}, "status": map[string]any{}}, "spec,status"},
	} {
		var got []string
		for _, p := range schema.ChangedParts(old, tc.obj) {
			got = append(got, string(p))
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("ChangedParts(%v) = %v, want %s", tc.obj, got, tc.want)
		}
	}
}
