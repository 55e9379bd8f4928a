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

// TestValidatorCorpus sends every invalid corpus object the way the API server would:
// spec problems as a CREATE by an admin, status problems as an UPDATE of the status
// subresource by the pool's node, from the same object without status.
func TestValidatorCorpus(t *testing.T) {
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("empty corpus")
	}
	v := newValidator(t)
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			req := request(admissionv1.Create, o.As, "", admin, o.JSON, nil)
			if o.Status {
				req = request(admissionv1.Update, o.As, "status", nodeA, o.JSON, withoutStatus(t, o.JSON))
			}
			d, err := v.Validate(context.Background(), req)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if d.Allowed {
				t.Fatalf("allowed, want a denial with %q", o.Error)
			}
			if !strings.Contains(d.Message(), o.Error) {
				t.Errorf("message %q does not contain %q", d.Message(), o.Error)
			}
		})
	}
}

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
		"class create":            {req: createClass(classJSON)},
		"pool create":             {req: createPool(poolJSON)},
		"status write by node":    {req: updatePoolStatus(nodeA, poolJSON, poolStatusJSON)},
		"status write by other":   {req: updatePoolStatus(kubelet("node-b"), poolJSON, poolStatusJSON), want: "status of pool placeholder-node-a may only be written by node node-a"},
		"node sets phase":         {req: updatePoolStatus(nodeA, poolStatusJSON, poolStatusPhase), want: "status.phase"},
		"class selector changed":  {req: request(admissionv1.Update, v1alpha1.KindSandboxPoolClass, "", admin, []byte(classWithSelector), []byte(classJSON)), want: "spec.selector"},
		"schema before policy":    {req: createClass(strings.Replace(classJSON, `"cpu":"4"`, `"cpu":"0"`, 1)), want: `spec.resourcePolicy.resources.cpu: Invalid value: "0": must be a quantity greater than zero`},
		"not a JSON object":       {req: request(admissionv1.Create, v1alpha1.KindSandboxPool, "", admin, []byte(`["list"]`), nil), want: "not a JSON object"},
		"wrong kind in the body":  {req: request(admissionv1.Create, v1alpha1.KindSandboxPool, "", admin, []byte(classJSON), nil), want: "kind"},
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

// TestValidatorObjectsReachPolicy checks what the policy sees: a CREATE with the schema's
// defaults, an UPDATE with the objects as the API server sent them (it has defaulted them
// already, from the CRD generated from the same schema).
func TestValidatorObjectsReachPolicy(t *testing.T) {
	v := newValidator(t, policytest.Bundle(t, `package sandboxpool.admission

deny contains {"field": "spec.placeholderPod.runtimeClassName", "msg": "create not defaulted"} if {
	input.request.operation == "CREATE"
	input.request.object.spec.placeholderPod.runtimeClassName != "placeholder"
}

deny contains {"field": "spec.placeholderPod.runtimeClassName", "msg": "create not defaulted"} if {
	input.request.operation == "CREATE"
	not input.request.object.spec.placeholderPod.runtimeClassName
}

deny contains {"field": "spec", "msg": "update not as sent"} if {
	input.request.operation == "UPDATE"
	input.request.object.spec.placeholderPod
}
`))
	for name, req := range map[string]*admissionv1.AdmissionRequest{
		"create": createClass(classJSON),
		"update": request(admissionv1.Update, v1alpha1.KindSandboxPoolClass, "", admin,
			[]byte(strings.Replace(classJSON, `"cpu":"4"`, `"cpu":"5"`, 1)), []byte(classJSON)),
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

// TestValidatorRatchetsUpdates: a pool stored under older rules (a bare numeric priority,
// refused today) still takes status writes, override edits and finalizer removal, while a
// write that adds a violation of its own is refused, naming the field; identity rules are
// not ratcheted.
func TestValidatorRatchetsUpdates(t *testing.T) {
	stored := strings.Replace(poolStatusJSON, `"nodeName":"node-a",`, `"nodeName":"node-a","placeholderPod":{"priority":1000},`, 1)
	stored = strings.Replace(stored, `"labels":{`, `"finalizers":["sandboxpool.agentcube.volcano.sh/placeholder-pod"],"labels":{`, 1)
	if d, err := newValidator(t).Validate(context.Background(), createPool(stored)); err != nil || d.Allowed {
		t.Fatalf("the stored pool passes today's rules (%+v, %v); the test needs one that does not", d, err)
	}
	override := `"override":{"enabled":true,"reason":"OPS-1","resourcePolicy":{"resources":{"cpu":"6","memory":"12Gi"}}},"resourcePolicy"`
	for name, tt := range map[string]struct {
		req  *admissionv1.AdmissionRequest
		want string
	}{
		"status write by the node": {req: updatePoolStatus(nodeA, stored, strings.Replace(stored, `"connected":true`, `"connected":false`, 1))},
		"override edit": {req: request(admissionv1.Update, v1alpha1.KindSandboxPool, "", admin,
			[]byte(strings.Replace(stored, `"resourcePolicy"`, override, 1)), []byte(stored))},
		"finalizer removal": {req: request(admissionv1.Update, v1alpha1.KindSandboxPool, "", controller,
			[]byte(strings.Replace(stored, `"finalizers":["sandboxpool.agentcube.volcano.sh/placeholder-pod"],`, ``, 1)), []byte(stored))},
		"status write of an invalid value": {req: updatePoolStatus(nodeA, stored, strings.Replace(stored, `"phase":"Running"`, `"phase":"Running","ip":"`+strings.Repeat("1", 65)+`"`, 1)),
			want: "status.placeholderPod.ip"},
		"override edit without a reason": {req: request(admissionv1.Update, v1alpha1.KindSandboxPool, "", admin,
			[]byte(strings.Replace(stored, `"resourcePolicy"`, `"override":{"enabled":true,"resourcePolicy":{"resources":{"cpu":"6","memory":"12Gi"}}},"resourcePolicy"`, 1)), []byte(stored)),
			want: "spec.override.reason"},
		"status write by another node": {req: updatePoolStatus(kubelet("node-b"), stored, strings.Replace(stored, `"connected":true`, `"connected":false`, 1)),
			want: "may only be written by node node-a"},
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
