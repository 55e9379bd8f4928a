package webhook_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

func TestValidatorExamples(t *testing.T) {
	objs, err := corpus.Examples()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("no examples")
	}
	v := newValidator(t)
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			d, err := v.Validate(context.Background(), request(admissionv1.Create, o.Kind, "", admin, o.JSON, nil))
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !d.Allowed {
				t.Errorf("denied: %s", d.Message())
			}
		})
	}
}

func TestValidatorDecisions(t *testing.T) {
	classWithSelector := strings.Replace(classJSON, `/pool":"default"`, `/pool":"other"`, 1)
	poolStatusPhase := strings.Replace(poolStatusJSON, `"status":{`, `"status":{"phase":"Ready",`, 1)
	for name, tt := range map[string]struct {
		req  *admissionv1.AdmissionRequest
		want string // "" = allowed; else a substring of the denial
	}{
		"class create":          {req: createClass(classJSON)},
		"pool create":           {req: createPool(poolJSON)},
		"status write by node":  {req: updatePoolStatus(nodeA, poolJSON, poolStatusJSON)},
		"status write by other": {req: updatePoolStatus(kubelet("node-b"), poolJSON, poolStatusJSON), want: "status of pool placeholder-node-a may only be written by node node-a"},
		"node sets phase":       {req: updatePoolStatus(nodeA, poolStatusJSON, poolStatusPhase), want: "status.phase"},
		// The shape and the immutable fields are the CRD's: the API server refuses these
		// before it calls the webhook, which does not check them again.
		"class selector changed":  {req: request(admissionv1.Update, v1alpha1.KindSandboxPoolClass, "", admin, []byte(classWithSelector), []byte(classJSON))},
		"class with zero cpu":     {req: createClass(strings.Replace(classJSON, `"cpu":"4"`, `"cpu":"0"`, 1))},
		"delete is not evaluated": {req: request(admissionv1.Delete, v1alpha1.KindSandboxPool, "", admin, nil, []byte(`{"junk":1}`))},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := newValidator(t).Validate(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			switch {
			case tt.want == "" && !d.Allowed:
				t.Errorf("denied: %s", d.Message())
			case tt.want != "" && d.Allowed:
				t.Errorf("allowed, want a denial with %q", tt.want)
			case tt.want != "" && !strings.Contains(d.Message(), tt.want):
				t.Errorf("message %q does not contain %q", d.Message(), tt.want)
			}
		})
	}
}

// TestValidatorObjectsReachPolicy checks what the policy sees: the objects as the API
// server sent them (validated and defaulted by it already, from the CRD generated from the
// CUE schema), neither defaulted again nor checked against the schema.
func TestValidatorObjectsReachPolicy(t *testing.T) {
	v := newValidator(t, policytest.Bundle(t, `package sandboxpool.admission

deny contains {"field": "spec.placeholderPod", "msg": "not as sent"} if {
	input.request.object.spec.placeholderPod
}

deny contains {"field": "spec.resourcePolicy", "msg": "not as sent"} if {
	input.request.object.spec.resourcePolicy.resources.cpu != "0"
}
`))
	zero := strings.Replace(classJSON, `"cpu":"4"`, `"cpu":"0"`, 1)
	for name, req := range map[string]*admissionv1.AdmissionRequest{
		"create": createClass(zero),
		"update": request(admissionv1.Update, v1alpha1.KindSandboxPoolClass, "", admin, []byte(zero), []byte(classJSON)),
	} {
		t.Run(name, func(t *testing.T) {
			d, err := v.Validate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				t.Errorf("denied: %s", d.Message())
			}
		})
	}
}

func TestValidatorErrors(t *testing.T) {
	pod := createPool(poolJSON)
	pod.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	otherVersion := createPool(poolJSON)
	otherVersion.Kind.Version = "v1beta1"
	lease := createPool(poolJSON)
	lease.Kind = metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
	wrongResource := createPool(poolJSON)
	wrongResource.Resource.Resource = v1alpha1.ResourceSandboxPoolClasses
	otherSubresource := updatePoolStatus(nodeA, poolJSON, poolJSON)
	otherSubresource.SubResource = "scale"
	noOld := updatePoolStatus(nodeA, poolJSON, poolJSON)
	noOld.OldObject = runtime.RawExtension{}
	badOld := updatePoolStatus(nodeA, poolJSON, poolJSON)
	badOld.OldObject = runtime.RawExtension{Raw: []byte(`{"truncated":`)}
	noObject := createPool(poolJSON)
	noObject.Object = runtime.RawExtension{}
	listObject := createPool(`["list"]`)

	for name, tt := range map[string]struct {
		req  *admissionv1.AdmissionRequest
		want error
	}{
		"pod":                       {req: pod, want: webhook.ErrUnsupportedKind},
		"other version":             {req: otherVersion, want: webhook.ErrUnsupportedKind},
		"lease":                     {req: lease, want: webhook.ErrUnsupportedKind},
		"wrong resource":            {req: wrongResource, want: webhook.ErrUnsupportedKind},
		"other subresource":         {req: otherSubresource, want: webhook.ErrUnsupportedKind},
		"update without old object": {req: noOld, want: webhook.ErrMalformedRequest},
		"old object not JSON":       {req: badOld, want: webhook.ErrMalformedRequest},
		"create without object":     {req: noObject, want: webhook.ErrMalformedRequest},
		"object not a JSON object":  {req: listObject, want: webhook.ErrMalformedRequest},
		"nil request":               {req: nil, want: webhook.ErrMalformedRequest},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := newValidator(t).Validate(context.Background(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Errorf("Validate error = %v, want %v", err, tt.want)
			}
			if d.Allowed {
				t.Error("allowed on error")
			}
		})
	}

	t.Run("policy error", func(t *testing.T) {
		d, err := newValidator(t, policytest.Bundle(t, erroringPolicy)).Validate(context.Background(), createPool(poolJSON))
		if err == nil || d.Allowed {
			t.Errorf("Validate = %+v, %v; want an error and no allow", d, err)
		}
	})
	t.Run("unsupported kind message", func(t *testing.T) {
		_, err := newValidator(t).Validate(context.Background(), pod)
		if err == nil || !strings.Contains(err.Error(), "unsupported kind") {
			t.Errorf("error %v does not say unsupported kind", err)
		}
	})
}
