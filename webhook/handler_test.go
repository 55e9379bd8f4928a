package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

// post sends body to h and returns the HTTP status and the decoded review (nil unless 200).
func post(t testing.TB, h http.Handler, contentType string, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, webhook.ValidatePath+"?timeout=5s", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return decodeResponse(t, w.Code, w.Body.Bytes())
}

func decodeResponse(t testing.TB, code int, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	if code != http.StatusOK {
		return code, nil, string(body)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil {
		t.Fatalf("decoding the response %q: %v", body, err)
	}
	if rv.APIVersion != admissionv1.SchemeGroupVersion.String() || rv.Kind != "AdmissionReview" || rv.Response == nil {
		t.Fatalf("response is not an AdmissionReview v1 with a response: %s", body)
	}
	return code, rv.Response, string(body)
}

func TestHandlerMalformed(t *testing.T) {
	valid := review(t, createClass(classJSON))
	noUID := createClass(classJSON)
	noUID.UID = ""
	huge := append(append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"pad":"`),
		bytes.Repeat([]byte("a"), webhook.MaxReviewBytes)...), `"}}}`...)

	for name, tt := range map[string]struct {
		method, contentType string
		body                []byte
		want                int
	}{
		"GET":                  {method: http.MethodGet, contentType: "application/json", body: valid, want: http.StatusMethodNotAllowed},
		"no content type":      {body: valid, want: http.StatusBadRequest},
		"text/plain":           {contentType: "text/plain", body: valid, want: http.StatusBadRequest},
		"empty body":           {body: nil, want: http.StatusBadRequest},
		"bad JSON":             {body: []byte(`{"apiVersion":`), want: http.StatusBadRequest},
		"trailing garbage":     {body: append(append([]byte{}, valid...), '}'), want: http.StatusBadRequest},
		"not an object":        {body: []byte(`[1,2]`), want: http.StatusBadRequest},
		"no request":           {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), want: http.StatusBadRequest},
		"v1beta1":              {body: bytes.Replace(valid, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), want: http.StatusBadRequest},
		"wrong kind":           {body: bytes.Replace(valid, []byte(`"AdmissionReview"`), []byte(`"Pod"`), 1), want: http.StatusBadRequest},
		"case-folded field":    {body: bytes.Replace(valid, []byte(`"request"`), []byte(`"Request"`), 1), want: http.StatusBadRequest},
		"no uid":               {body: review(t, noUID), want: http.StatusBadRequest},
		"body larger than cap": {body: huge, want: http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newHandler(t, newValidator(t), reg)
			if tt.contentType == "" && name != "no content type" {
				tt.contentType = "application/json; charset=utf-8"
			}
			r := httptest.NewRequest(cmpOr(tt.method, http.MethodPost), webhook.ValidatePath, bytes.NewReader(tt.body))
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("status = %d, want %d (body %.200q)", w.Code, tt.want, w.Body.String())
			}
			if strings.Contains(w.Body.String(), `"allowed":true`) {
				t.Errorf("malformed body allowed: %s", w.Body.String())
			}
			if got := counter(t, reg, webhook.MetricMalformedReviews, nil); got != 1 {
				t.Errorf("%s = %v, want 1", webhook.MetricMalformedReviews, got)
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestHandlerDecisions(t *testing.T) {
	// The node writes the controller's field and condition: two policy violations.
	nodeOverreach := strings.Replace(poolStatusJSON, `"status":{`, `"status":{"phase":"Ready",`, 1)
	nodeOverreach = strings.Replace(nodeOverreach, `"type":"PlaceholderPodReady"`, `"type":"NodeNotFound"`, 1)

	for name, tt := range map[string]struct {
		req      *admissionv1.AdmissionRequest
		wantCode int32    // 0 = allowed
		wantMsgs []string // each must be in the message
		// wantViolations is the least number of violations the message must join.
		wantViolations int
	}{
		"allowed": {req: createClass(classJSON)},
		"class create under the controller's field manager": {req: underFieldManager(t, createClass(classJSON), v1alpha1.FieldManagerController),
			wantCode: http.StatusForbidden, wantMsgs: []string{
				"metadata.managedFields[manager=sandboxpool-controller]: the controller writes under this field manager only",
			}},
		"policy denial": {req: updatePoolStatus(nodeA, poolJSON, nodeOverreach), wantCode: http.StatusForbidden, wantMsgs: []string{
			"status.phase", "NodeNotFound",
		}, wantViolations: 2},
		"unsupported kind": {req: func() *admissionv1.AdmissionRequest {
			r := createClass(classJSON)
			r.Kind = metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
			return r
		}(), wantCode: http.StatusInternalServerError, wantMsgs: []string{"unsupported kind"}},
	} {
		t.Run(name, func(t *testing.T) {
			tt.req.UID = types.UID("uid-" + strings.ReplaceAll(name, " ", "-"))
			code, resp, body := post(t, newHandler(t, newValidator(t), prometheus.NewRegistry()), "application/json", review(t, tt.req))
			if code != http.StatusOK {
				t.Fatalf("HTTP status %d: %s", code, body)
			}
			if resp.UID != tt.req.UID {
				t.Errorf("uid = %q, want %q", resp.UID, tt.req.UID)
			}
			if tt.wantCode == 0 {
				if !resp.Allowed {
					t.Errorf("denied: %s", body)
				}
				return
			}
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("allowed or no status: %s", body)
			}
			if resp.Result.Code != tt.wantCode {
				t.Errorf("status.code = %d, want %d", resp.Result.Code, tt.wantCode)
			}
			if tt.wantCode == http.StatusForbidden && resp.Result.Reason != metav1.StatusReasonForbidden {
				t.Errorf("status.reason = %q, want Forbidden", resp.Result.Reason)
			}
			if tt.wantCode == http.StatusForbidden {
				// The message is every violation's, joined.
				d, err := newValidator(t).Validate(context.Background(), tt.req)
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Violations) < tt.wantViolations {
					t.Errorf("%d violations, want at least %d", len(d.Violations), tt.wantViolations)
				}
				if resp.Result.Message != d.Message() {
					t.Errorf("message %q, want %q", resp.Result.Message, d.Message())
				}
			}
			for _, m := range tt.wantMsgs {
				if !strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q does not contain %q", resp.Result.Message, m)
				}
			}
		})
	}
}

// TestHandlerPolicyError runs a policy that fails at evaluation: the answer is a 500 that
// allows nothing, and the error is counted.
func TestHandlerPolicyError(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHandler(t, newValidator(t, policytest.Bundle(t, erroringPolicy)), reg)
	srv := httptest.NewTLSServer(h)
	defer srv.Close()

	req := createPool(poolJSON)
	resp, err := srv.Client().Post(srv.URL+webhook.ValidatePath, "application/json", bytes.NewReader(review(t, req)))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, ar, raw := decodeResponse(t, resp.StatusCode, body)
	if ar == nil {
		t.Fatalf("HTTP status %d: %s", resp.StatusCode, raw)
	}
	if ar.Allowed || ar.Result == nil || ar.Result.Code != http.StatusInternalServerError || ar.Result.Message == "" {
		t.Errorf("response %s, want allowed=false with a 500 and the error", raw)
	}
	if ar.UID != req.UID {
		t.Errorf("uid = %q, want %q", ar.UID, req.UID)
	}
	labels := map[string]string{"kind": v1alpha1.KindSandboxPool, "operation": "CREATE", "subresource": "", "result": webhook.ResultError}
	if got := counter(t, reg, webhook.MetricDecisions, labels); got != 1 {
		t.Errorf("%s%v = %v, want 1", webhook.MetricDecisions, labels, got)
	}
}

// TestHandlerDeadline: a review whose ?timeout= has already passed is not decided.
func TestHandlerDeadline(t *testing.T) {
	h := newHandler(t, newValidator(t), prometheus.NewRegistry())
	r := httptest.NewRequest(http.MethodPost, webhook.ValidatePath+"?timeout=1ns", bytes.NewReader(review(t, createPool(poolJSON))))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	_, resp, body := decodeResponse(t, w.Code, w.Body.Bytes())
	if resp == nil || resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError {
		t.Errorf("response %s, want a 500", body)
	}
}

func TestHandlerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHandler(t, newValidator(t), reg)
	// A second handler on the same registry shares the collectors.
	h2 := newHandler(t, newValidator(t), reg)

	post(t, h, "application/json", review(t, createClass(classJSON)))
	post(t, h2, "application/json", review(t, createClass(classJSON)))
	post(t, h, "application/json", review(t, underFieldManager(t, createClass(classJSON), v1alpha1.FieldManagerController)))
	post(t, h, "application/json", review(t, updatePoolStatus(nodeA, poolJSON, poolStatusJSON)))
	weird := createClass(classJSON)
	weird.Operation = "FROB"
	weird.SubResource = "scale"
	post(t, h, "application/json", review(t, weird))

	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"kind": v1alpha1.KindSandboxPoolClass, "operation": "CREATE", "subresource": "", "result": webhook.ResultAllowed}, 2},
		{map[string]string{"kind": v1alpha1.KindSandboxPoolClass, "operation": "CREATE", "subresource": "", "result": webhook.ResultDenied}, 1},
		{map[string]string{"kind": v1alpha1.KindSandboxPool, "operation": "UPDATE", "subresource": "status", "result": webhook.ResultAllowed}, 1},
		{map[string]string{"kind": v1alpha1.KindSandboxPoolClass, "operation": "other", "subresource": "other", "result": webhook.ResultError}, 1},
	} {
		if got := counter(t, reg, webhook.MetricDecisions, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", webhook.MetricDecisions, c.labels, got, c.want)
		}
	}
	classCreates := map[string]string{"kind": v1alpha1.KindSandboxPoolClass, "operation": "CREATE"}
	if got := counter(t, reg, webhook.MetricDecisionDuration, classCreates); got != 3 {
		t.Errorf("%s%v sample count = %v, want 3", webhook.MetricDecisionDuration, classCreates, got)
	}
}

// counter is the value of the counter name with exactly labels, or a histogram's sample
// count; 0 when there is no such series.
func counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// hasLabels reports whether m has exactly the labels want (an empty value is no label).
func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		if l.GetValue() != "" {
			got[l.GetName()] = l.GetValue()
		}
	}
	n := 0
	for k, v := range want {
		if v == "" {
			continue
		}
		if got[k] != v {
			return false
		}
		n++
	}
	return n == len(got)
}
