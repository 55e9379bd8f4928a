package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/internal/jsonraw"
	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// statusSubresource is the subresource through which pool and class status is written.
const statusSubresource = "status"

// Errors of Validate. Each means the request cannot be decided: the webhook answers 500.
var (
	// ErrUnsupportedKind is returned for a request on anything but a SandboxPoolClass or
	// a SandboxPool of this API version, or on a resource that does not hold that kind.
	ErrUnsupportedKind = errors.New("unsupported kind")
	// ErrMalformedRequest is returned for a CREATE or UPDATE without an object, an UPDATE
	// whose old object is missing or not a JSON object, and an unknown operation.
	ErrMalformedRequest = errors.New("malformed admission request")
)

// kinds maps the kinds of the API to their resource.
var kinds = map[string]string{
	v1alpha1.KindSandboxPoolClass: v1alpha1.ResourceSandboxPoolClasses,
	v1alpha1.KindSandboxPool:      v1alpha1.ResourceSandboxPools,
}

// Validator decides admission requests with the Rego policy. It is safe for concurrent use
// (the policy engine is).
//
// It checks nothing the API server has checked before calling it: the shape of an object
// (the CRD's OpenAPI schema and CEL rules, generated from the CUE schema, with the API
// server's ratcheting of objects stored under older rules) and its defaults are the API
// server's. The policy holds what only a webhook can: who may change what, transitions,
// other objects and field ownership (bundles/README.md).
type Validator struct {
	policy *policy.Engine
}

// NewValidator returns a Validator that decides requests with p.
func NewValidator(p *policy.Engine) *Validator {
	return &Validator{policy: p}
}

// Validate decides req.
//
// DELETE and CONNECT are allowed without evaluation. A CREATE or an UPDATE of a class or a
// pool (or their status) must carry its object, and an UPDATE its old object, as JSON
// objects: the policy sees them as the API server sent them, validated and defaulted.
//
// An error means no decision: an unsupported kind or resource (ErrUnsupportedKind), a
// malformed request (ErrMalformedRequest), or a policy that could not be evaluated. It is
// never an allow.
func (v *Validator) Validate(ctx context.Context, req *admissionv1.AdmissionRequest) (policy.Decision, error) {
	if req == nil {
		return policy.Decision{}, fmt.Errorf("validating: %w: no request", ErrMalformedRequest)
	}
	switch req.Operation {
	case admissionv1.Delete, admissionv1.Connect:
		return policy.Decision{Allowed: true}, nil
	case admissionv1.Create, admissionv1.Update:
	default:
		return policy.Decision{}, fmt.Errorf("validating: %w: operation %q", ErrMalformedRequest, req.Operation)
	}
	kind, err := kindOf(req)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("validating: %w", err)
	}
	if err := jsonObject(req.Object); err != nil {
		return policy.Decision{}, fmt.Errorf("validating %s: %w: object: %w", kind, ErrMalformedRequest, err)
	}
	if req.Operation == admissionv1.Update {
		if err := jsonObject(req.OldObject); err != nil {
			return policy.Decision{}, fmt.Errorf("validating %s: %w: oldObject: %w", kind, ErrMalformedRequest, err)
		}
	}
	d, err := v.policy.Evaluate(ctx, req)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("validating %s %s: %w", kind, req.Name, err)
	}
	return d, nil
}

// kindOf is the kind of the request; the request's resource must hold that kind.
func kindOf(req *admissionv1.AdmissionRequest) (string, error) {
	resource, ok := kinds[req.Kind.Kind]
	if !ok || req.Kind.Group != v1alpha1.GroupName || req.Kind.Version != v1alpha1.Version {
		return "", fmt.Errorf("%w %s", ErrUnsupportedKind, req.Kind.String())
	}
	r := req.Resource
	if r.Group != v1alpha1.GroupName || r.Version != v1alpha1.Version || r.Resource != resource ||
		(req.SubResource != "" && req.SubResource != statusSubresource) {
		return "", fmt.Errorf("%w %s on resource %s, subresource %q", ErrUnsupportedKind, req.Kind.Kind, r.String(), req.SubResource)
	}
	return req.Kind.Kind, nil
}

// jsonObject checks that ext holds a JSON object.
func jsonObject(ext runtime.RawExtension) error {
	raw := bytes.TrimSpace(ext.Raw)
	switch {
	case raw == nil && ext.Object != nil:
		return nil // the policy's input encodes it, as the API server would have
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return errors.New("missing")
	case raw[0] != '{' || !jsonraw.Valid(raw):
		return errors.New("not a JSON object")
	}
	return nil
}
