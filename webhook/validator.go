package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/jsonraw"
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

// kinds maps the kinds of the API to their schema kind and resource.
var kinds = map[string]struct {
	schema   schema.Kind
	resource string
}{
	v1alpha1.KindSandboxPoolClass: {schema.KindSandboxPoolClass, v1alpha1.ResourceSandboxPoolClasses},
	v1alpha1.KindSandboxPool:      {schema.KindSandboxPool, v1alpha1.ResourceSandboxPools},
}

// Validator is the admission pipeline: the CUE schema, then the Rego policy. It is safe
// for concurrent use (both of its parts are).
type Validator struct {
	schema *schema.Schema
	policy *policy.Engine
}

// NewValidator returns a Validator that checks objects with s and requests with p.
func NewValidator(s *schema.Schema, p *policy.Engine) *Validator {
	return &Validator{schema: s, policy: p}
}

// Validate decides req.
//
// DELETE and CONNECT are allowed without evaluation. A CREATE is validated and defaulted by
// the CUE schema. An UPDATE (which must also carry an old object that is a JSON object) is
// validated as the API server validates an update of a custom resource: only the parts that
// changed (a status write: the status; a finalizer removal: the metadata), and a violation
// about a value the old object already had is ignored (schema.ValidateUpdate), so objects
// stored under older, looser rules can still be written where the write itself is valid. A
// schema violation denies the request with one policy.Violation per broken rule, each
// message starting with the field. Only a request the schema accepts goes on to the Rego
// policy, which sees a CREATE with the defaulted object and an UPDATE with the objects as
// the API server sent them (it has already applied the CRD's defaults, generated from the
// same schema). The policy's transition and identity rules are never ratcheted.
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

	obj, err := rawJSON(req.Object)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("validating %s: %w: object: %w", kind, ErrMalformedRequest, err)
	}
	var old []byte
	if req.Operation == admissionv1.Update {
		if old, err = rawJSON(req.OldObject); err == nil && (old[0] != '{' || !jsonraw.Valid(old)) {
			err = errors.New("not a JSON object")
		}
		if err != nil {
			return policy.Decision{}, fmt.Errorf("validating %s: %w: oldObject: %w", kind, ErrMalformedRequest, err)
		}
	}

	if obj[0] != '{' {
		return policy.Decision{Violations: []policy.Violation{{Msg: fmt.Sprintf("the %s is not a JSON object", kind)}}}, nil
	}
	sub := *req
	if old == nil {
		defaulted, err := v.schema.Default(kind, obj)
		if err != nil {
			return schemaDecision(kind, err)
		}
		sub.Object = runtime.RawExtension{Raw: defaulted}
	} else {
		if err := v.schema.ValidateUpdate(kind, old, obj); err != nil {
			return schemaDecision(kind, err)
		}
		sub.Object, sub.OldObject = runtime.RawExtension{Raw: obj}, runtime.RawExtension{Raw: old}
	}
	d, err := v.policy.Evaluate(ctx, &sub)
	if err != nil {
		return policy.Decision{}, fmt.Errorf("validating %s %s: %w", kind, req.Name, err)
	}
	return d, nil
}

// schemaDecision is the denial of a schema violation, or no decision for any other error.
func schemaDecision(kind schema.Kind, err error) (policy.Decision, error) {
	if ve, ok := errors.AsType[*schema.ValidationError](err); ok {
		return schemaDenial(ve), nil
	}
	return policy.Decision{}, fmt.Errorf("validating %s against the schema: %w", kind, err)
}

// kindOf is the schema kind of the request; the request's resource must hold that kind.
func kindOf(req *admissionv1.AdmissionRequest) (schema.Kind, error) {
	k, ok := kinds[req.Kind.Kind]
	if !ok || req.Kind.Group != v1alpha1.GroupName || req.Kind.Version != v1alpha1.Version {
		return "", fmt.Errorf("%w %s", ErrUnsupportedKind, req.Kind.String())
	}
	r := req.Resource
	if r.Group != v1alpha1.GroupName || r.Version != v1alpha1.Version || r.Resource != k.resource ||
		(req.SubResource != "" && req.SubResource != statusSubresource) {
		return "", fmt.Errorf("%w %s on resource %s, subresource %q", ErrUnsupportedKind, req.Kind.Kind, r.String(), req.SubResource)
	}
	return k.schema, nil
}

// rawJSON is the JSON ext holds; the schema judges whether it is an object of the kind.
func rawJSON(ext runtime.RawExtension) ([]byte, error) {
	raw := ext.Raw
	if raw == nil && ext.Object != nil {
		var err error
		if raw, err = json.Marshal(ext.Object); err != nil {
			return nil, fmt.Errorf("encoding %T: %w", ext.Object, err)
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("missing")
	}
	return raw, nil
}

// schemaDenial turns the schema's field errors into violations whose messages start with
// the field, as the policy's do.
func schemaDenial(ve *schema.ValidationError) policy.Decision {
	d := policy.Decision{Violations: make([]policy.Violation, 0, len(ve.Fields))}
	for _, f := range ve.Fields {
		d.Violations = append(d.Violations, policy.Violation{Field: f.Path, Msg: f.String()})
	}
	if len(d.Violations) == 0 {
		d.Violations = append(d.Violations, policy.Violation{Msg: ve.Error()})
	}
	return d
}
