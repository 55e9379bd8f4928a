package policy_test

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestCorpus: the policy restates no rule the API server holds (one rule, one place). The
// API server checks the CRD (OpenAPI and CEL generated from the CUE schema) before it calls
// the webhook, so the policy, shown each invalid object the API server refuses
// ("# apiserver:") as a CREATE by the controller, allows it; an object the CRD alone cannot
// refuse ("# apiserver-gap:") is the policy's, and it denies it with the corpus's
// "# webhook:" message.
func TestCorpus(t *testing.T) {
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	e := policytest.NewEngine(t)
	for _, obj := range objs {
		t.Run(obj.Name, func(t *testing.T) {
			if obj.Kind != obj.As {
				t.Skip("an object of another kind: the API server decodes it as the kind it declares")
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
			switch {
			case obj.APIServerGap != "" && obj.Webhook == "":
				t.Fatal(`"# apiserver-gap:" without the "# webhook:" message of the layer that refuses it`)
			case obj.APIServerGap != "" && (d.Allowed || !strings.Contains(d.Message(), obj.Webhook)):
				t.Errorf("the CRD cannot refuse it, the policy must, with %q: allowed=%v %s", obj.Webhook, d.Allowed, d.Message())
			case obj.APIServerGap == "" && !d.Allowed:
				t.Errorf("the policy restates the CRD's rule %q: %s", obj.APIServer, d.Message())
			}
		})
	}
}
