// Package upgrade tests an upgrade that tightens the API's rules, on a real API server:
// objects stored under an older, looser release's CRDs stay writable after the CRDs are
// upgraded, where the write itself is valid (status writes, override edits, finalizer
// removal), while writes that add a violation are refused. The API server ratchets its
// CRD validation; the webhook, in place throughout, checks no rule of the schema (its
// policy judges who changes what, not the object's shape), so it has nothing to ratchet.
package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	sbschema "github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/crdgen"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/webhook"
)

var suite framework.Suite

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, func(ctx context.Context, cp *framework.ControlPlane) error {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(false)))
		return cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "runtimeclass.yaml")
	}, framework.WithWebhooks(filepath.Join("deploy", "webhook"))))
}

var (
	poolsGVR   = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools}
	classesGVR = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPoolClasses}
)

// looser are the rules this release added, as they read in the CUE files: the older
// release is today's schema without them. Each must be found exactly once.
var looser = map[string][]string{
	"sandboxpool.cue": {
		"\tif priority != _|_ {\n\t\tpriorityClassName!: _\n\t}\n",
		"\t@crd(rule=\"!has(self.priority) || has(self.priorityClassName)\"",
		` & ("Class" | "Override" | error("must be one of Class, Override"))`,
		" & struct.MaxFields(64)",
	},
	"k8s.cue": {
		"\tif operator != _|_ if operator == \"In\" || operator == \"NotIn\" {\n\t\tvalues!: list.MinItems(1)\n\t}\n",
		"\tif operator != _|_ if operator == \"Exists\" || operator == \"DoesNotExist\" {\n\t\tvalues?: list.MaxItems(0)\n\t}\n",
		"\t@crd(rule=\"self.operator in ['In', 'NotIn']",
		" & struct.MaxFields(64)",
	},
}

// loosened is what replaces a cut of looser, where something must: the older release had
// no bound on the number of placeholder pod annotations and matchLabels, nor a CEL rule on
// their keys, whose cost needs a bound; its stand-in is the widest bound that rule's cost
// allows.
var loosened = map[string]string{" & struct.MaxFields(64)": " & struct.MaxFields(512)"}

// olderSchema is today's schema without the looser rules.
func olderSchema(t *testing.T) *sbschema.Schema {
	t.Helper()
	srcs, err := sbschema.Files()
	if err != nil {
		t.Fatal(err)
	}
	for file, cuts := range looser {
		src := string(srcs[file])
		for _, cut := range cuts {
			if n := strings.Count(src, cut); n != 1 {
				t.Fatalf("%s holds %q %d times, want once: update the test's older release", file, cut, n)
			}
			start := strings.Index(src, cut)
			end := start + len(cut)
			if strings.HasPrefix(cut, "\t@crd(") { // the attribute runs to the end of its line
				end = start + strings.Index(src[start:], "\n") + 1
			}
			src = src[:start] + loosened[cut] + src[end:]
		}
		srcs[file] = []byte(src)
	}
	s, err := sbschema.Compile(srcs)
	if err != nil {
		t.Fatalf("compiling the older schema: %v", err)
	}
	return s
}

// installCRDs applies the CRDs generated from s, as an operator applies a release's.
func installCRDs(t *testing.T, cp *framework.ControlPlane, s *sbschema.Schema) {
	t.Helper()
	crds, err := crdgen.Generate(s)
	if err != nil {
		t.Fatalf("generating the CRDs: %v", err)
	}
	dir := t.TempDir()
	for _, crd := range crds {
		b, err := crdgen.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, crd.Name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, stderr, err := cp.Kubectl(context.Background(), nil, "apply", "-f", dir); err != nil {
		t.Fatalf("applying the older CRDs: %v: %s", err, stderr)
	}
}

func object(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// The objects the older release stored: a class whose selector gives Exists a value and
// whose placeholder pod has a bare priority, and its pool with the bare priority and more
// placeholder pod annotations than today's bound (legacyAnnotations), both with the
// controller's finalizer.
const (
	legacyClass = `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPoolClass
metadata: {name: legacy, finalizers: [sandboxpool.agentcube.volcano.sh/pools]}
spec:
  selector: {matchExpressions: [{key: pool, operator: Exists, values: [legacy]}]}
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
  placeholderPod: {priority: 1000}
`
	legacyPool = `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPool
metadata:
  name: placeholder-old-node
  labels: {sandbox-pool.io/class: legacy, sandbox-pool.io/node: old-node}
  finalizers: [sandboxpool.agentcube.volcano.sh/placeholder-pod]
spec:
  classRef: {name: legacy}
  nodeName: old-node
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
  placeholderPod: {priority: 1000, annotations: ANNOTATIONS}
`
	legacyPoolName = "placeholder-old-node"
)

// legacyAnnotations are 65 placeholder pod annotations, one more than today's bound.
func legacyAnnotations() string {
	var kv []string
	for i := range 65 {
		kv = append(kv, fmt.Sprintf("example.com/a%d: v", i))
	}
	return "{" + strings.Join(kv, ", ") + "}"
}

// clientAs returns a maker of dynamic clients for an identity's configuration, failing t
// when making the identity did.
func clientAs(t *testing.T) func(*rest.Config, error) dynamic.Interface {
	return func(cfg *rest.Config, err error) dynamic.Interface {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestUpgradeRatchets stores objects under the older release, upgrades the CRDs and the
// webhook, and writes to them as the agent, the controller and an operator would.
func TestUpgradeRatchets(t *testing.T) {
	cp := suite.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admin := clientAs(t)(cp.Config, nil)
	node := clientAs(t)(cp.AddUser("system:node:old-node", "system:nodes", "system:authenticated"))
	controller := clientAs(t)(cp.ServiceAccountConfig(ctx, v1alpha1.DefaultSystemNamespace, "sandbox-pool-controller"))
	operator := clientAs(t)(cp.AddUser("olivia", v1alpha1.OperatorGroup, "system:authenticated"))

	// The older release.
	installCRDs(t, cp, olderSchema(t))
	waitRule(t, admin, false)
	if err := cp.StartWebhook(ctx, webhook.DefaultOptions(), zap.New(zap.UseDevMode(false))); err != nil {
		t.Fatal(err)
	}
	storedPool := strings.Replace(legacyPool, "ANNOTATIONS", legacyAnnotations(), 1)
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		y   string
	}{{classesGVR, legacyClass}, {poolsGVR, storedPool}} {
		if _, err := admin.Resource(o.gvr).Create(ctx, object(t, o.y), metav1.CreateOptions{}); err != nil {
			t.Fatalf("storing under the older release: %v", err)
		}
	}
	// The older agent wrote status.override.source "spec.override", outside today's enum.
	agentStatus := func(zone string) map[string]any {
		return map[string]any{"poolInfo": map[string]any{"zone": zone},
			"override":   map[string]any{"enabled": false, "source": "spec.override"},
			"conditions": []any{framework.Condition(v1alpha1.ConditionPlaceholderPodReady.String(), "True", "Running")}}
	}
	if err := applyStatus(ctx, node, v1alpha1.FieldManagerAgent, agentStatus("zone-a")); err != nil {
		t.Fatalf("the agent's status under the older release: %v", err)
	}

	// The upgrade: the CRDs (docs/operator-guide.md, "Upgrade").
	if err := cp.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	waitRule(t, admin, true)

	// What the objects still take.
	for _, w := range []struct {
		what string
		err  error
	}{
		{"the agent's status write", applyStatus(ctx, node, v1alpha1.FieldManagerAgent, agentStatus("zone-b"))},
		{"the controller's status write", applyStatus(ctx, controller, v1alpha1.FieldManagerController, map[string]any{
			"phase": string(v1alpha1.PhaseReady), "conditions": []any{
				framework.Condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True", "LeaseRenewed"),
				framework.Condition(v1alpha1.ConditionNodeNotFound.String(), "False", "NodeExists")}})},
		{"an operator's override edit", mergePatch(ctx, operator, poolsGVR, legacyPoolName,
			`{"spec":{"override":{"enabled":true,"reason":"OPS-1","resourcePolicy":{"resources":{"cpu":"3","memory":"6Gi"}}}}}`)},
		{"the controller's snapshot update", mergePatch(ctx, controller, poolsGVR, legacyPoolName, `{"spec":{"resourcePolicy":{"resources":{"cpu":"3"}}}}`)},
	} {
		if w.err != nil {
			t.Errorf("%s on the pool stored under the older release: %v", w.what, w.err)
		}
	}

	// What is refused: writes that add a violation of their own.
	for _, w := range []struct {
		what, says string
		err        error
	}{
		{"a new class whose selector gives Exists a value", "values must be non-empty when operator is In or NotIn",
			create(ctx, admin, classesGVR, strings.Replace(legacyClass, "name: legacy, finalizers: [sandboxpool.agentcube.volcano.sh/pools]", "name: new", 1))},
		{"a new pool with a bare priority", "priorityClassName is required when priority is set",
			create(ctx, admin, poolsGVR, strings.NewReplacer("old-node", "new-node", "finalizers: [sandboxpool.agentcube.volcano.sh/placeholder-pod]", "finalizers: []",
				"ANNOTATIONS", "{}").Replace(legacyPool))},
		{"a change of the stored bare priority to another", "priorityClassName is required when priority is set",
			mergePatch(ctx, controller, poolsGVR, legacyPoolName, `{"spec":{"placeholderPod":{"priority":7}}}`)},
		{"a new pool with more placeholder pod annotations than the bound", "spec.placeholderPod.annotations: Too many: 65: must have at most 64 items",
			create(ctx, admin, poolsGVR, strings.NewReplacer("old-node", "new-node", "finalizers: [sandboxpool.agentcube.volcano.sh/placeholder-pod]", "finalizers: []",
				"priority: 1000, ", "").Replace(storedPool))},
		{"an override with an invalid resource name", `spec.override.resourcePolicy.resources: Invalid value: key "bad name!" must be a qualified name`,
			mergePatch(ctx, operator, poolsGVR, legacyPoolName, `{"spec":{"override":{"resourcePolicy":{"resources":{"bad name!":"1"}}}}}`)},
		{"a status write that changes override.source to a value outside the enum", `status.override.source`,
			applyStatus(ctx, node, v1alpha1.FieldManagerAgent, map[string]any{"poolInfo": map[string]any{"zone": "zone-b"},
				"override": map[string]any{"enabled": false, "source": "spec"}})},
		{"a status write with an invalid condition reason", `Invalid value: "not a reason"`,
			applyStatus(ctx, node, v1alpha1.FieldManagerAgent, map[string]any{"conditions": []any{
				framework.Condition(v1alpha1.ConditionPlaceholderPodReady.String(), "True", "not a reason")}})},
	} {
		if w.err == nil || !strings.Contains(w.err.Error(), w.says) {
			t.Errorf("%s: %v, want a refusal that says %q", w.what, w.err, w.says)
		}
	}

	// Deletion: both finalizers come off (the controller's metadata writes) and the objects
	// go, although their specs break today's rules.
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{poolsGVR, legacyPoolName}, {classesGVR, "legacy"}} {
		if err := admin.Resource(o.gvr).Delete(ctx, o.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := mergePatch(ctx, controller, o.gvr, o.name, `{"metadata":{"finalizers":null}}`); err != nil {
			t.Errorf("removing the finalizer of %s stored under the older release: %v", o.name, err)
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := admin.Resource(o.gvr).Get(ctx, o.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("%s not gone after its finalizer was removed: %v", o.name, err)
		}
	}
}

func applyStatus(ctx context.Context, c dynamic.Interface, manager string, status map[string]any) error {
	_, err := c.Resource(poolsGVR).ApplyStatus(ctx, legacyPoolName, framework.PoolStatus(legacyPoolName, status),
		metav1.ApplyOptions{FieldManager: manager})
	return err
}

func mergePatch(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, name, patch string) error {
	_, err := c.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func create(ctx context.Context, c dynamic.Interface, gvr schema.GroupVersionResource, y string) error {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		return err
	}
	_, err := c.Resource(gvr).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// waitRule waits until the API server serves the CRD with (present) or without the rule
// of a priority without its class: an established CRD's new schema reaches the handlers a
// moment after the apply returns.
func waitRule(t *testing.T, admin dynamic.Interface, present bool) {
	t.Helper()
	probe := strings.NewReplacer("old-node", "probe-node", "finalizers: [sandboxpool.agentcube.volcano.sh/placeholder-pod]", "finalizers: []",
		"ANNOTATIONS", "{}").Replace(legacyPool)
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = create(ctx, admin, poolsGVR, probe)
		// The webhook may not answer yet: only the CRD's own verdict counts here.
		refusedByCRD := apierrors.IsInvalid(last) && strings.Contains(last.Error(), "priorityClassName is required")
		return refusedByCRD == present, nil
	})
	if err != nil {
		t.Fatalf("the CRD's priority rule present=%v not served within 30s: last answer %v", present, last)
	}
}
