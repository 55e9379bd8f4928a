package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	sbschema "github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// removed, as a mutation's value, deletes the field.
var removed = &struct{}{}

// mutation breaks one rule of the CUE schema in a valid object: the value at path (dotted,
// list indexes as numbers) is replaced, or removed.
type mutation struct {
	path  string
	value any
}

// TestSchemaRulesHeldByAPIServer breaks each kind of rule the CUE schema states (types,
// required fields, patterns, lengths, bounds, enums, list and map sizes, map keys,
// timestamps, quantities, the rules between fields) in a valid class, pool and their
// statuses, one at a time: each broken object is one CUE rejects, and the live API server
// (the CRDs generated from the same CUE, the webhook in place) must refuse it too, with a
// message naming the field or one that holds it. The corpus checks the messages; this
// checks that no rule of the schema is left to a layer that no longer runs it.
func TestSchemaRulesHeldByAPIServer(t *testing.T) {
	requireCluster(t)
	s := sbschema.MustCompiled()
	ctx := context.Background()

	class := objectOf(t, "class-default.yaml")
	pool := objectOf(t, "pool-full-status.yaml")
	poolStatus := pool["status"]
	delete(pool, "status")
	classStatus := map[string]any{"observedGeneration": 1, "totalSandboxPools": 1, "readySandboxPools": 1, "notReadySandboxPools": 0,
		"conditions": []any{map[string]any{"type": "NodeConflict", "status": "False", "lastTransitionTime": "2026-11-29T09:00:00Z", "reason": "NoConflict", "message": ""}}}

	// The status mutations are written to these objects by their writers: the pool's node
	// (its agent's fields) and the controller (the class's status).
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{{classesGVR, class}, {poolsGVR, pool}} {
		u := &unstructured.Unstructured{Object: deepCopy(t, o.obj)}
		u.SetName(u.GetName() + "-mutations")
		if o.gvr == poolsGVR {
			_ = unstructured.SetNestedField(u.Object, "node-mutations", "spec", "nodeName")
			u.SetName(poolName("node-mutations"))
		}
		if _, err := admin(t).Resource(o.gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", u.GetName(), err)
		}
		t.Cleanup(func() { _ = admin(t).Resource(o.gvr).Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
	}
	node, controller := nodeClient(t, "node-mutations"), controllerClient(t)

	long := func(n int) string { return strings.Repeat("a", n) }
	entries := func(n int, key func(int) string, value any) map[string]any {
		m := map[string]any{}
		for i := range n {
			m[key(i)] = value
		}
		return m
	}
	items := func(n int, item func(int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = item(i)
		}
		return out
	}
	word := func(i int) string { return "k" + strconv.Itoa(i) }

	specs := map[string][]mutation{
		v1alpha1.KindSandboxPoolClass: {
			{"metadata.name", "Not_A_Name"},
			{"metadata.labels", map[string]any{"bad key!": "x"}},
			{"metadata.labels", map[string]any{"k": "bad value!"}},
			{"metadata.annotations", map[string]any{"bad key!": "x"}},
			{"spec", removed},
			{"spec.resourcePolicy", removed},
			{"spec.resourcePolicy.resources", map[string]any{"memory": "8Gi"}},
			{"spec.resourcePolicy.resources.cpu", 0},
			{"spec.resourcePolicy.resources.cpu", "1.5.5"},
			{"spec.resourcePolicy.resources.cpu", strings.Repeat("1", 65)},
			{"spec.resourcePolicy.resources.cpu", true},
			{"spec.resourcePolicy.resources.memory", "-1Gi"},
			{"spec.resourcePolicy.resources", entries(33, func(i int) string { return "example.com/r" + strconv.Itoa(i) }, "1")},
			{"spec.resourcePolicy.resources.example\\.com/gpu", -1},
			{"spec.resourcePolicy.resources.example\\.com/gpu", "1Gb"},
			{"spec.selector", removed},
			{"spec.selector.matchLabels", entries(65, word, "v")},
			{"spec.selector.matchLabels", map[string]any{"k": long(64)}},
			{"spec.selector.matchLabels", map[string]any{"example.com/": "v"}},
			{"spec.selector.matchExpressions", items(65, func(i int) any { return map[string]any{"key": word(i), "operator": "Exists"} })},
			{"spec.selector.matchExpressions", []any{map[string]any{"key": "k", "operator": "In", "values": items(257, func(i int) any { return word(i) })}}},
			{"spec.selector.matchExpressions", []any{map[string]any{"operator": "Exists"}}},
			{"spec.selector.matchExpressions", []any{map[string]any{"key": long(64), "operator": "Exists"}}},
			{"spec.selector.matchExpressions", []any{map[string]any{"key": "k", "operator": "In", "values": []any{"bad value!"}}}},
			{"spec.placeholderPod.runtimeClassName", long(254)},
			{"spec.placeholderPod.runtimeClassName", ""},
			{"spec.placeholderPod.priorityClassName", "Not-A-Name"},
			{"spec.placeholderPod.priority", 3000000000},
			{"spec.placeholderPod.priority", "1000"},
			{"spec.placeholderPod.annotations", map[string]any{"example.com/a": long(3585)}},
			{"spec.placeholderPod.tolerations", items(65, func(i int) any { return map[string]any{"key": word(i), "operator": "Exists"} })},
			{"spec.placeholderPod.annotations", entries(65, func(i int) string { return "example.com/a" + strconv.Itoa(i) }, "v")},
			{"spec.placeholderPod.annotations", map[string]any{"example.com/a": 1}},
			{"spec.placeholderPod.tolerations.0.operator", "Maybe"},
			{"spec.placeholderPod.tolerations.0.effect", "Sometimes"},
			{"spec.placeholderPod.tolerations.0.key", long(317)},
			{"spec.placeholderPod.tolerations.0.value", long(64)},
			{"spec.placeholderPod.tolerations.0.tolerationSeconds", 1.5},
			{"spec.placeholderPod.tolerations", map[string]any{"key": "k"}},
		},
		v1alpha1.KindSandboxPool: {
			{"spec.nodeName", removed},
			{"spec.nodeName", long(254)},
			{"spec.classRef.name", "Not-A-Name"},
			{"spec.classRef", map[string]any{}},
			{"spec.override", map[string]any{"enabled": true, "reason": "", "resourcePolicy": map[string]any{"resources": map[string]any{"cpu": "1", "memory": "1Gi"}}}},
			{"spec.override", map[string]any{"enabled": "yes"}},
			{"spec.override.reason", long(1025)},
			{"spec.override.resourcePolicy", map[string]any{"resources": map[string]any{"cpu": "1"}}},
			{"spec.nodeCtl", map[string]any{"endpoint": "unix://"}},
			{"spec.nodeCtl", map[string]any{"endpoint": "unix:///" + long(1020)}},
			{"spec.nodeCtl", map[string]any{"socket": "unix:///run/node-ctl.sock"}},
		},
	}
	statuses := map[string][]mutation{
		v1alpha1.KindSandboxPoolClass: {
			{"status.observedGeneration", -1},
			{"status.totalSandboxPools", -1},
			{"status.readySandboxPools", 3000000000},
			{"status.notReadySandboxPools", "1"},
			{"status.conditions.0.reason", "not a reason"},
			{"status.conditions.0.status", "Maybe"},
			{"status.conditions.0.type", "bad type!"},
			{"status.conditions.0.type", "PlaceholderPodReady"},
			{"status.conditions.0.lastTransitionTime", "yesterday"},
			{"status.conditions.0.lastTransitionTime", removed},
			{"status.conditions.0.message", long(32769)},
		},
		v1alpha1.KindSandboxPool: {
			{"status.placeholderPod.name", long(254)},
			{"status.placeholderPod.uid", long(129)},
			{"status.placeholderAgent.lastHeartbeat", "2026-11-29 10:00"},
			{"status.placeholderAgent.nodeCtlStarted", "true"},
			{"status.placeholderAgent.version", long(257)},
			{"status.override.source", "Other"},
			{"status.override.overriddenAt", "now"},
			{"status.resize.status", removed},
			{"status.resize.status", "Done"},
			{"status.resize.requestedCpu", "lots"},
			{"status.resize.deferredReason", long(1025)},
			{"status.nodeCtl.downSince", "2026-11-29"},
			{"status.poolInfo.allocatableMemoryBytes", -1},
			{"status.poolInfo.allocatedMemoryBytes", 1.5},
			{"status.poolInfo.zone", long(257)},
			{"status.lastAppliedGeneration", -1},
			{"status.conditions.0.type", "bad type!"},
			{"status.conditions.0.type", "MadeUp"},
			{"status.conditions.0.lastTransitionTime", "2026-11-29T10:00:00." + strings.Repeat("1", 64) + "Z"},
			{"status.conditions.0.message", long(32769)},
			{"status.conditions.0.observedGeneration", -1},
			{"status.conditions", []any{map[string]any{"type": "PlaceholderPodReady", "status": "True"}}},
		},
	}

	check := func(t *testing.T, kind string, full map[string]any, m mutation, write func(map[string]any) error) {
		t.Helper()
		broken := deepCopy(t, full)
		mutate(t, broken, m)
		raw, err := json.Marshal(broken)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(sbschema.Kind(kind), raw); !errors.As(err, new(*sbschema.ValidationError)) {
			t.Fatalf("the CUE schema accepts the mutation (%v): it breaks no rule", err)
		}
		err = write(broken)
		if err == nil {
			t.Fatalf("the API server accepted %s = %.80v, which the CUE schema refuses", m.path, m.value)
		}
		if field := apiPath(m.path); !namesField(err.Error(), field) {
			t.Errorf("the answer names neither %s nor a field that holds it:\n%s", field, err)
		}
	}
	create := func(gvr schema.GroupVersionResource) func(map[string]any) error {
		return func(obj map[string]any) error {
			_, err := admin(t).Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: obj},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
			return err
		}
	}
	patchStatus := func(c dynamic.Interface, gvr schema.GroupVersionResource, name string) func(map[string]any) error {
		return func(obj map[string]any) error {
			patch, err := json.Marshal(map[string]any{"status": obj["status"]})
			if err != nil {
				return err
			}
			_, err = c.Resource(gvr).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict}, "status")
			return err
		}
	}
	// The node writes its agent's fields only; the controller's phase and conditions are
	// left out of the pool's status (the webhook would refuse the node those, whatever
	// their shape).
	agentStatus := deepCopy(t, map[string]any{"s": poolStatus})["s"].(map[string]any)
	delete(agentStatus, "phase")
	var agentConditions []any
	for _, c := range agentStatus["conditions"].([]any) {
		if c.(map[string]any)["type"] != v1alpha1.ConditionPlaceholderAgentHealthy.String() {
			agentConditions = append(agentConditions, c)
		}
	}
	agentStatus["conditions"] = agentConditions

	for i, m := range specs[v1alpha1.KindSandboxPoolClass] {
		t.Run(fmt.Sprintf("class/%02d %s", i, m.path), func(t *testing.T) { check(t, v1alpha1.KindSandboxPoolClass, class, m, create(classesGVR)) })
	}
	for i, m := range specs[v1alpha1.KindSandboxPool] {
		t.Run(fmt.Sprintf("pool/%02d %s", i, m.path), func(t *testing.T) { check(t, v1alpha1.KindSandboxPool, pool, m, create(poolsGVR)) })
	}
	withStatus := func(obj map[string]any, status map[string]any) map[string]any {
		out := deepCopy(t, obj)
		out["status"] = status
		return out
	}
	for i, m := range statuses[v1alpha1.KindSandboxPoolClass] {
		t.Run(fmt.Sprintf("class-status/%02d %s", i, m.path), func(t *testing.T) {
			check(t, v1alpha1.KindSandboxPoolClass, withStatus(class, classStatus), m, patchStatus(controller, classesGVR, "default-mutations"))
		})
	}
	for i, m := range statuses[v1alpha1.KindSandboxPool] {
		t.Run(fmt.Sprintf("pool-status/%02d %s", i, m.path), func(t *testing.T) {
			check(t, v1alpha1.KindSandboxPool, withStatus(pool, agentStatus), m, patchStatus(node, poolsGVR, poolName("node-mutations")))
		})
	}
}

// objectOf is a valid corpus object (an example or a golden one), decoded.
func objectOf(t *testing.T, name string) map[string]any {
	t.Helper()
	o, err := corpus.Find(name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(o.JSON, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func deepCopy(t *testing.T, m map[string]any) map[string]any {
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

// segments splits a mutation's path at the dots that are not escaped ("a\.b" is one key).
func segments(path string) []string {
	parts := strings.Split(strings.ReplaceAll(path, `\.`, "\x00"), ".")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, "\x00", ".")
	}
	return parts
}

// apiPath is a mutation's path as the API server writes it: list indexes in brackets.
func apiPath(path string) string {
	var b strings.Builder
	for _, s := range segments(path) {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// mutate applies m to obj; every step of the path but the last must exist.
func mutate(t *testing.T, obj map[string]any, m mutation) {
	t.Helper()
	sels := segments(m.path)
	var cur any = obj
	for _, s := range sels[:len(sels)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[s]
		case []any:
			i, _ := strconv.Atoi(s)
			cur = c[i]
		}
		if cur == nil {
			t.Fatalf("%s: no %s in the base object", m.path, s)
		}
	}
	last := sels[len(sels)-1]
	switch c := cur.(type) {
	case map[string]any:
		if m.value == removed {
			delete(c, last)
		} else {
			c[last] = m.value
		}
	case []any:
		i, _ := strconv.Atoi(last)
		c[i] = m.value
	default:
		t.Fatalf("%s: %s is not an object or a list", m.path, last)
	}
}
