package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// BenchmarkInput measures what building the policy's input costs for the agent's status
// write as the API server sends it (policytest's pool with a full status, one node-ctl
// figure new each time), three ways: inputOf with the engine's kept terms (what Evaluate
// does), inputOf with no term kept (a new cache each time: the parser alone), and
// ast.ValueFromReader of the encoded request (OPA's own reading of JSON). It is what says
// whether the hand-written parser and its cache still pay for themselves
// (docs/benchmarks.md).
func BenchmarkInput(b *testing.B) {
	stored, err := os.ReadFile(filepath.Join("policytest", "testdata", "pool-status.json"))
	if err != nil {
		b.Fatal(err)
	}
	const figure = `"allocatedMemoryBytes": 0`
	if !bytes.Contains(stored, []byte(figure)) {
		b.Fatal("policytest/testdata/pool-status.json has no figure to change")
	}
	n := 0
	next := func() *admissionv1.AdmissionRequest {
		n++
		obj := bytes.Replace(stored, []byte(figure), []byte(`"allocatedMemoryBytes": `+strconv.Itoa(n)), 1)
		return &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Update, SubResource: "status", Name: "placeholder-node-a",
			Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: v1alpha1.KindSandboxPool},
			Resource:  metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools},
			UserInfo:  authenticationv1.UserInfo{Username: "system:node:node-a", Groups: []string{"system:nodes"}},
			Object:    runtime.RawExtension{Raw: obj},
			OldObject: runtime.RawExtension{Raw: stored}}
	}
	kept := newTerms()
	for _, bc := range []struct {
		name  string
		input func(*admissionv1.AdmissionRequest) (ast.Value, error)
	}{
		{"kept-terms", func(r *admissionv1.AdmissionRequest) (ast.Value, error) { return inputOf(r, kept) }},
		{"parser-alone", func(r *admissionv1.AdmissionRequest) (ast.Value, error) { return inputOf(r, newTerms()) }},
		{"value-from-reader", func(r *admissionv1.AdmissionRequest) (ast.Value, error) {
			raw, err := json.Marshal(map[string]any{"request": r})
			if err != nil {
				return nil, err
			}
			return ast.ValueFromReader(bytes.NewReader(raw))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := bc.input(next()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				req := next()
				b.StartTimer()
				if _, err := bc.input(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
