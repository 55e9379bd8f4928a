package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// inventory is n pools of class default on nodes node-0 .. node-(n-1).
func inventory(n int) map[string]policy.PoolRef {
	pools := make(map[string]policy.PoolRef, n)
	for i := range n {
		node := fmt.Sprintf("node-%d", i)
		pools[poolName(node)] = policy.PoolRef{Class: "default", NodeName: node}
	}
	return pools
}

// statusWrite is policytest.StatusWrite as the node's request.
func statusWrite(b *testing.B) *admissionv1.AdmissionRequest {
	oldJSON, objJSON := policytest.StatusWrite(b)
	var old, obj v1alpha1.SandboxPool
	if err := json.Unmarshal(oldJSON, &old); err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(objJSON, &obj); err != nil {
		b.Fatal(err)
	}
	return updateStatus(b, kubelet(policytest.StatusWriteNode), &old, &obj)
}

// BenchmarkEvaluate measures one admission decision per request kind. The pool create
// runs against an inventory of 1,000 pools (and 10,000: the design's scale, docs/design.md §5), since the
// class-conflict rule scans it. pool-status-write is the agent's most common write as the
// API server sends it (policytest.StatusWrite: a full status and its managedFields).
func BenchmarkEvaluate(b *testing.B) {
	ctx := context.Background()
	statusUpdate := updateStatus(b, kubelet("node-b"), withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
		st.PoolInfo.Zone = "z2"
		meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionResizeInProgress.String(), metav1.ConditionTrue))
	}))
	for _, bm := range []struct {
		name      string
		inventory int
		req       *admissionv1.AdmissionRequest
		// runtimeClasses: the engine checks the RuntimeClass, as the webhook's does.
		runtimeClasses bool
	}{
		{name: "class-create", inventory: 1000, req: createClass(b, newClass())},
		{name: "class-create-runtimeclass", inventory: 1000, req: createClass(b, newClass()), runtimeClasses: true},
		{name: "pool-create", inventory: 1000, req: createPool(b, newPool("node-new"))},
		{name: "pool-create-inventory-10k", inventory: 10000, req: createPool(b, newPool("node-new"))},
		{name: "pool-status-update-by-node", inventory: 1000, req: statusUpdate},
		{name: "pool-status-write", inventory: 1000, req: statusWrite(b)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			opts := []policy.Option{policy.WithInventory(inventory(bm.inventory))}
			if bm.runtimeClasses {
				opts = append(opts, policy.WithRuntimeClasses())
			}
			e := policytest.NewEngine(b, opts...)
			if bm.runtimeClasses {
				if err := e.UpsertRuntimeClass(ctx, v1alpha1.DefaultRuntimeClassName, v1alpha1.PlaceholderRuntimeHandler); err != nil {
					b.Fatal(err)
				}
				if err := e.SetRuntimeClassesSynced(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if d, err := e.Evaluate(ctx, bm.req); err != nil || !d.Allowed {
				b.Fatalf("Evaluate = %+v, %v; want an allow", d, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Evaluate(ctx, bm.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRuleCost measures what OPA charges for each rule a decision reads, the unit the
// admission bundle is written to spend sparingly (docs/benchmarks-log.md, the policy layer): a
// policy that reads no rule, the same policy reading ten constants, and reading ten rules
// with a body, each evaluated on the agent's status write. The differences are the cost of
// ten rule evaluations; the first is the floor of any decision (the input and the query).
func BenchmarkRuleCost(b *testing.B) {
	policyReading := func(reads string) string {
		return "package sandboxpool.admission\n\ndeny contains op if {\n\top := input.request.operation\n" +
			reads + "\tcount(op) == 0\n}\n" // never true, and not one OPA's rule index can skip
	}
	var consts, rules, readConsts, readRules strings.Builder
	for i := range 10 {
		fmt.Fprintf(&consts, "c%d := \"v%d\"\n", i, i)
		fmt.Fprintf(&rules, "r%d if input.request.operation != \"v%d\"\n", i, i)
		fmt.Fprintf(&readConsts, "\tc%d != op\n", i)
		fmt.Fprintf(&readRules, "\tr%d\n", i)
	}
	req := statusWrite(b)
	for _, bm := range []struct{ name, rego string }{
		{"no-rule", policyReading("")},
		{"10-constants", policyReading(readConsts.String()) + consts.String()},
		{"10-rules", policyReading(readRules.String()) + rules.String()},
	} {
		b.Run(bm.name, func(b *testing.B) {
			e := policytest.NewEngine(b, policytest.Bundle(b, bm.rego))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Evaluate(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
