package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

// fuzzSeeds are reviews of every corpus object (the requests a webhook would get if the
// API server did not check the CRD's schema first) and valid requests, plus junk.
func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	invalid, err := corpus.Invalid()
	if err != nil {
		f.Fatal(err)
	}
	examples, err := corpus.Examples()
	if err != nil {
		f.Fatal(err)
	}
	var seeds [][]byte
	for _, o := range invalid {
		req := request(admissionv1.Create, o.As, "", admin, o.JSON, nil)
		if o.Status {
			req = request(admissionv1.Update, o.As, "status", nodeA, o.JSON, withoutStatus(f, o.JSON))
		}
		seeds = append(seeds, review(f, req))
	}
	for _, o := range examples {
		seeds = append(seeds, review(f, request(admissionv1.Create, o.Kind, "", admin, o.JSON, nil)))
	}
	lease := createClass(classJSON)
	lease.Kind = metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
	del := request(admissionv1.Delete, v1alpha1.KindSandboxPool, "", admin, nil, []byte(poolJSON))
	seeds = append(seeds,
		review(f, createClass(classJSON)),
		review(f, createPool(poolJSON)),
		review(f, updatePoolStatus(nodeA, poolJSON, poolStatusJSON)),
		review(f, updatePoolStatus(kubelet("node-b"), poolJSON, poolStatusJSON)),
		review(f, lease),
		review(f, del),
		nil,
		[]byte(`{}`),
		[]byte(`null`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE",`+
			`"kind":{"group":"sandboxpool.agentcube.volcano.sh","version":"v1alpha1","kind":"SandboxPool"},`+
			`"resource":{"group":"sandboxpool.agentcube.volcano.sh","version":"v1alpha1","resource":"sandboxpools"},"object":[]}}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","UID":"v"}}`),
		[]byte("\xff\xfe{"),
	)
	return seeds
}

// FuzzHandler posts arbitrary bodies to the Handler. It must never panic; a body that is
// not an AdmissionReview v1 with a request (and a uid) gets 400 and no allow; any other
// gets a 200 review echoing the uid. The oracle of a decision is the Rego policy alone
// (the webhook checks no schema: the API server does): a request is allowed, or denied as
// forbidden with the policy's message, exactly when the policy, shown the request as the
// API server's decoder reads the body (sigs.k8s.io/json on the whole review), decides so —
// the handler's own reading of a review (objects copied apart, the policy's input parser
// and term cache) never changes a decision.
func FuzzHandler(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	engine := policytest.NewEngine(f)
	h := newHandler(f, webhook.NewValidator(engine), prometheus.NewRegistry())

	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, webhook.ValidatePath, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		if strings.Contains(w.Body.String(), `"allowed":true`) && w.Code != http.StatusOK {
			t.Fatalf("HTTP %d with an allow: %s", w.Code, w.Body.String())
		}
		if !isReview(body) {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("not a review, got HTTP %d, want 400: %s", w.Code, w.Body.String())
			}
			return
		}
		if w.Code == http.StatusBadRequest {
			return // e.g. a field whose case only encoding/json forgives
		}
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP %d, want 200 or 400: %s", w.Code, w.Body.String())
		}
		var in, out admissionv1.AdmissionReview
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &in); err != nil {
			t.Fatalf("answered 200 to a body the API server's decoder rejects: %v", err)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("response is not a review: %v: %s", err, w.Body.String())
		}
		if out.Response.UID != in.Request.UID {
			t.Fatalf("response uid %q, request uid %q", out.Response.UID, in.Request.UID)
		}
		req := in.Request
		if !out.Response.Allowed {
			if out.Response.Result == nil || out.Response.Result.Code < 400 {
				t.Fatalf("denial without a 4xx/5xx status: %s", w.Body.String())
			}
			if out.Response.Result.Code != http.StatusForbidden {
				return // no decision: a request the Validator cannot evaluate
			}
			// A decision of the policy: the same decision, with the same words, as the
			// policy makes on the request as the API server's decoder reads it.
			d, err := engine.Evaluate(context.Background(), req)
			if err != nil || d.Allowed {
				t.Fatalf("denied a request the policy allows (%v): %s", err, w.Body.String())
			}
			if msg := d.Message(); msg != "" && msg != out.Response.Result.Message {
				t.Fatalf("denied with %q, the policy says %q", out.Response.Result.Message, msg)
			}
			return
		}
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return // DELETE and CONNECT are allowed without evaluation
		}
		if req.Kind.Kind != v1alpha1.KindSandboxPoolClass && req.Kind.Kind != v1alpha1.KindSandboxPool {
			t.Fatalf("allowed a %s", req.Kind.String())
		}
		if d, err := engine.Evaluate(context.Background(), req); err != nil || !d.Allowed {
			t.Fatalf("allowed a request the policy does not allow (%v): %s", err, d.Message())
		}
	})
}

// isReview is the fuzz oracle: body decodes (leniently, with encoding/json) to an
// AdmissionReview v1 with a request that has a uid.
func isReview(body []byte) bool {
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil {
		return false
	}
	return rv.APIVersion == admissionv1.SchemeGroupVersion.String() && rv.Kind == "AdmissionReview" &&
		rv.Request != nil && rv.Request.UID != ""
}
