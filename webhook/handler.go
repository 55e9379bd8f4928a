package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/agentcube/sandboxpool/internal/jsonraw"
	"github.com/agentcube/sandboxpool/policy"
)

const (
	// ValidatePath is where the webhook serves admission reviews; the
	// ValidatingWebhookConfiguration's clientConfig points there.
	ValidatePath = "/validate"
	// MaxReviewBytes bounds a review's body: the API server's 3 MiB request limit.
	MaxReviewBytes = 3 << 20
	// maxTimeout bounds the ?timeout= the API server sends (webhooks may wait up to 30 s).
	maxTimeout = 30 * time.Second
)

// reviewKind is the kind of the AdmissionReview envelope.
const reviewKind = "AdmissionReview"

var reviewAPIVersion = admissionv1.SchemeGroupVersion.String()

// Handler serves AdmissionReview v1 over HTTP: POST a review, get the review back with its
// response. A body that is not an AdmissionReview v1 with a request gets 400; every
// decision is a 200 whose response echoes the request's UID. A denial is allowed=false with
// status 403 Forbidden and every violation's message joined; a request the Validator
// cannot decide is allowed=false with status 500 and the error, never an allow.
type Handler struct {
	validator *Validator
	metrics   *metrics
	log       logr.Logger
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that decides with v, registers its metrics on reg and logs
// every denial and error to log.
func NewHandler(v *Validator, reg prometheus.Registerer, log logr.Logger) (*Handler, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Handler{validator: v, metrics: m, log: log}, nil
}

// ServeHTTP answers one admission review.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.malformed(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed", r.Method))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.malformed(w, http.StatusBadRequest, fmt.Errorf("content type %q is not application/json", r.Header.Get("Content-Type")))
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		h.malformed(w, http.StatusBadRequest, fmt.Errorf("reading admission review: %w", err))
		return
	}
	req, err := decodeReview(body)
	if err != nil {
		h.malformed(w, http.StatusBadRequest, err)
		return
	}

	ctx, cancel := requestContext(r)
	defer cancel()
	d, err := h.validator.Validate(ctx, req)
	resp := response(req.UID, d, err)
	result := resultLabel(resp.Allowed, err)
	h.metrics.observe(req, result, time.Since(start).Seconds())
	h.logDecision(req, result, d, err)

	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Response: resp,
	})
	if err != nil { // cannot happen for these types; never answer without a decision
		http.Error(w, "encoding admission review: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out); err != nil {
		h.log.V(1).Info("writing admission review", "uid", req.UID, "error", err.Error())
	}
}

// readBody reads the review's body, at most MaxReviewBytes, into a buffer of the size the
// request declares (io.ReadAll would grow it by doubling: twice the allocation).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= MaxReviewBytes {
		buf.Grow(int(n) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	return buf.Bytes(), err
}

// decodeReview returns the request of an AdmissionReview v1, decoded case-sensitively as
// the API server decodes.
func decodeReview(body []byte) (*admissionv1.AdmissionRequest, error) {
	review, ok := decodeObjectsApart(body)
	if !ok {
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &review); err != nil {
			return nil, fmt.Errorf("decoding admission review: %w", err)
		}
	}
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		return nil, fmt.Errorf("decoding admission review: got apiVersion %q, kind %q; want %s %s",
			review.APIVersion, review.Kind, reviewAPIVersion, reviewKind)
	}
	if review.Request == nil {
		return nil, errors.New("decoding admission review: no request")
	}
	if review.Request.UID == "" {
		return nil, errors.New("decoding admission review: request.uid is empty")
	}
	return review.Request, nil
}

// decodeObjectsApart decodes a review as kjson does, but for the request's object and
// oldObject, most of the body: they are only copied, as RawExtension would copy them, and
// the decoder reads the rest. ok is false when the body is not a valid review it can cut
// that way (then kjson decodes it, and reports what is wrong).
func decodeObjectsApart(body []byte) (review admissionv1.AdmissionReview, ok bool) {
	if !jsonraw.Valid(body) {
		return review, false
	}
	top, ok := jsonraw.Members(body)
	if !ok {
		return review, false
	}
	var objects map[string][]byte
	for i, m := range top {
		if m.Key != "request" {
			continue
		}
		req, ok := jsonraw.Members(m.Value)
		if !ok {
			return review, false
		}
		rest := req[:0:0]
		objects = map[string][]byte{}
		for _, r := range req {
			if r.Key == "object" || r.Key == "oldObject" {
				objects[r.Key] = r.Value
			} else {
				rest = append(rest, r)
			}
		}
		top[i].Value = jsonraw.Object(rest)
	}
	if objects == nil {
		return review, false
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(jsonraw.Object(top), &review); err != nil || review.Request == nil {
		return admissionv1.AdmissionReview{}, false
	}
	for key, ext := range map[string]*runtime.RawExtension{"object": &review.Request.Object, "oldObject": &review.Request.OldObject} {
		if raw, found := objects[key]; found {
			if err := ext.UnmarshalJSON(raw); err != nil {
				return admissionv1.AdmissionReview{}, false
			}
		}
	}
	return review, true
}

// requestContext bounds the decision by the ?timeout= the API server adds to the URL.
func requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
		return context.WithTimeout(r.Context(), min(t, maxTimeout))
	}
	return context.WithCancel(r.Context())
}

// response is the answer to a request with uid, decided d or failed with err.
func response(uid types.UID, d policy.Decision, err error) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: uid}
	switch {
	case err != nil:
		resp.Result = &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusInternalServerError,
			Reason:  metav1.StatusReasonInternalError,
			Message: err.Error(),
		}
	case d.Allowed:
		resp.Allowed = true
	default:
		msg := d.Message()
		if msg == "" {
			msg = "denied by the SandboxPool admission policy"
		}
		resp.Result = &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: msg,
		}
	}
	return resp
}

// malformed answers a body that is not a review: no decision, nothing allowed.
func (h *Handler) malformed(w http.ResponseWriter, code int, err error) {
	h.metrics.malformed.Inc()
	h.log.V(1).Info("malformed admission review", "code", code, "error", err.Error())
	http.Error(w, err.Error(), code)
}

// logDecision logs every denial and error with who asked for what; allows only at V(1).
func (h *Handler) logDecision(req *admissionv1.AdmissionRequest, result string, d policy.Decision, err error) {
	kv := []any{
		"uid", req.UID,
		"kind", req.Kind.Kind,
		"name", req.Name,
		"operation", req.Operation,
		"subresource", req.SubResource,
		"user", req.UserInfo.Username,
		"groups", req.UserInfo.Groups,
	}
	switch result {
	case ResultError:
		h.log.Error(err, "admission request not decided", kv...)
	case ResultDenied:
		h.log.Info("admission request denied", append(kv, "violations", violationMessages(d.Violations))...)
	default:
		h.log.V(1).Info("admission request allowed", kv...)
	}
}

func violationMessages(vs []policy.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Msg
	}
	return out
}
