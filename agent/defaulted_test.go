package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestDefaultedKeepsOneVersion: a pool the agent has defaulted is not evaluated again until
// its stored version changes, what it returns is the pool's own copy, and a pool that fails
// the schema is never taken from the memo.
func TestDefaultedKeepsOneVersion(t *testing.T) {
	sch, err := schema.Compiled()
	if err != nil {
		t.Fatal(err)
	}
	a := testAgent(t)
	a.schema = sch
	pool := &v1alpha1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName("node-a"), UID: "uid-1", ResourceVersion: "10"},
		Spec: v1alpha1.SandboxPoolSpec{
			ClassRef: v1alpha1.ClassRef{Name: "default"}, NodeName: "node-a",
			ResourcePolicy: v1alpha1.ResourcePolicy{Resources: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		},
	}
	first, err := a.defaulted(pool)
	if err != nil {
		t.Fatal(err)
	}
	if a.schemaEvaluations != 1 {
		t.Fatalf("first pass: %d evaluations, want 1", a.schemaEvaluations)
	}
	if equality.Semantic.DeepEqual(first.Spec, pool.Spec) {
		t.Fatal("the schema filled in no default: the test would not see a stale memo")
	}
	first.Spec.NodeName = "changed by the caller"
	again, err := a.defaulted(pool)
	if err != nil {
		t.Fatal(err)
	}
	if a.schemaEvaluations != 1 {
		t.Errorf("the same version again: %d evaluations, want 1", a.schemaEvaluations)
	}
	if again.Spec.NodeName != "node-a" {
		t.Errorf("the memo returned what a caller changed: nodeName %q", again.Spec.NodeName)
	}

	changed := pool.DeepCopy()
	changed.ResourceVersion = "11"
	changed.Spec.ResourcePolicy.Resources[corev1.ResourceCPU] = resource.MustParse("700m")
	got, err := a.defaulted(changed)
	if err != nil {
		t.Fatal(err)
	}
	if a.schemaEvaluations != 2 || got.Spec.ResourcePolicy.Resources.Cpu().MilliValue() != 700 {
		t.Errorf("a new version: %d evaluations and cpu %s, want 2 and 700m", a.schemaEvaluations, got.Spec.ResourcePolicy.Resources.Cpu())
	}

	bad := changed.DeepCopy()
	bad.ResourceVersion = "12"
	bad.Spec.NodeName = "Not A Node"
	for range 2 {
		if _, err := a.defaulted(bad); err == nil {
			t.Fatal("a pool with an invalid nodeName passed the schema")
		}
	}
	if a.schemaEvaluations != 4 {
		t.Errorf("an invalid pool twice: %d evaluations in all, want 4 (never from the memo)", a.schemaEvaluations)
	}
}
