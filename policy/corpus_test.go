package policy_test

import (
	"context"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// policyRejects are the corpus objects the admission policy rejects too (defence in depth
// behind the schema), with the schema's message as the start of its own.
var policyRejects = map[string]bool{
	"01-class-missing-memory.yaml":     true,
	"02-class-zero-cpu.yaml":           true,
	"03-class-negative-cpu.yaml":       true,
	"04-class-malformed-quantity.yaml": true,
	"05-class-float-cpu.yaml":          true,
	"07-class-bad-runtimeclass.yaml":   true,
	"11-pool-override-no-reason.yaml":  true,
	"12-pool-override-no-policy.yaml":  true,
	"13-pool-endpoint-tcp.yaml":        true,
	"14-pool-wrong-name.yaml":          true,
	"15-pool-bad-nodename.yaml":        true,
	"17-pool-negative-hugepages.yaml":  true,
}

func TestCorpus(t *testing.T) {
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	e := policytest.NewEngine(t)
	seen := 0
	for _, obj := range objs {
		t.Run(obj.Name, func(t *testing.T) {
			if obj.Kind != obj.As || obj.Status {
				t.Skip("shape rule of the schema only")
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
			if !policyRejects[obj.Name] {
				t.Logf("left to the schema: %s (policy: %q)", obj.Error, d.Message())
				return
			}
			seen++
			if !hasMessage(d, obj.Error) {
				t.Errorf("violations %+v: none starts with %q", d.Violations, obj.Error)
			}
		})
	}
	if seen != len(policyRejects) {
		t.Errorf("checked %d corpus objects, want %d", seen, len(policyRejects))
	}
}

func hasMessage(d policy.Decision, prefix string) bool {
	for _, v := range d.Violations {
		if strings.HasPrefix(v.Msg, prefix) {
			return true
		}
	}
	return false
}
