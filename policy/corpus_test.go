package policy_test

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestCorpus: the policy restates no rule of the schema (one rule, one place). The webhook
// runs the schema before the policy, so every shape violation of the corpus is the
// schema's alone: the policy, shown each invalid object as a CREATE by the controller,
// allows it.
func TestCorpus(t *testing.T) {
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	e := policytest.NewEngine(t)
	for _, obj := range objs {
		t.Run(obj.Name, func(t *testing.T) {
			if obj.Kind != obj.As {
				t.Skip("an object of another kind: the webhook refuses it before the schema")
			}
			res := v1alpha1.ResourceSandboxPools
			if obj.Kind == v1alpha1.KindSandboxPoolClass {
				res = v1alpha1.ResourceSandboxPoolClasses
			}
			req := request(t, admissionv1.Create, res, "", controller, nil, nil)
			req.Object = runtime.RawExtension{Raw: obj.JSON}
			d, err := e.Evaluate(context.Background(), req)
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if !d.Allowed {
				t.Errorf("the policy restates the schema's rule %q: %s", obj.Error, d.Message())
			}
		})
	}
}
