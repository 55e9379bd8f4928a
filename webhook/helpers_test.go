package webhook_test

import (
	"encoding/json"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

const testUID types.UID = "705ab4f5-6393-11e8-b7cc-42010a800002"

// Callers.
var (
	admin      = authenticationv1.UserInfo{Username: "kubernetes-admin", Groups: []string{user.SystemPrivilegedGroup}}
	controller = authenticationv1.UserInfo{Username: policy.DefaultControllerUsername, Groups: []string{user.AllAuthenticated}}
	nodeA      = kubelet("node-a")
)

func kubelet(node string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: "system:node:" + node, Groups: []string{user.NodesGroup, user.AllAuthenticated}}
}

// request is an admission request of op on an object of kind (by sub: "" or "status").
func request(op admissionv1.Operation, kind, sub string, who authenticationv1.UserInfo, obj, old []byte) *admissionv1.AdmissionRequest {
	res := v1alpha1.ResourceSandboxPools
	if kind == v1alpha1.KindSandboxPoolClass {
		res = v1alpha1.ResourceSandboxPoolClasses
	}
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	for _, b := range [][]byte{old, obj} {
		if b != nil {
			_ = json.Unmarshal(b, &meta)
		}
	}
	return &admissionv1.AdmissionRequest{
		UID:         testUID,
		Kind:        metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: kind},
		Resource:    metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: res},
		SubResource: sub,
		Name:        meta.Metadata.Name,
		Operation:   op,
		UserInfo:    who,
		Object:      runtime.RawExtension{Raw: obj},
		OldObject:   runtime.RawExtension{Raw: old},
	}
}

// underFieldManager is req made with the field manager m (its options' fieldManager).
func underFieldManager(t testing.TB, req *admissionv1.AdmissionRequest, m string) *admissionv1.AdmissionRequest {
	t.Helper()
	opts, err := json.Marshal(metav1.CreateOptions{FieldManager: m})
	if err != nil {
		t.Fatal(err)
	}
	req.Options = runtime.RawExtension{Raw: opts}
	return req
}

// withoutStatus is obj (JSON) with its status removed.
func withoutStatus(t testing.TB, obj []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// review is req wrapped in an AdmissionReview v1.
func review(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newValidator(t testing.TB, opts ...policy.Option) *webhook.Validator {
	t.Helper()
	return webhook.NewValidator(policytest.NewEngine(t, opts...))
}

func newHandler(t testing.TB, v *webhook.Validator, reg prometheus.Registerer) *webhook.Handler {
	t.Helper()
	h, err := webhook.NewHandler(v, reg, logr.Discard())
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

// erroringPolicy fails at evaluation time: value is a complete rule with two conflicting
// values whenever the request's uid and name differ.
const erroringPolicy = `package sandboxpool.admission

deny contains {"field": "x", "msg": value}

value := input.request.uid

value := input.request.name
`

const (
	classJSON = `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPoolClass",` +
		`"metadata":{"name":"default"},"spec":{"selector":{"matchLabels":{"sandbox.agentcube.io/pool":"default"}},` +
		`"resourcePolicy":{"resources":{"cpu":"4","memory":"8Gi"}}}}`
	poolJSON = `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool",` +
		`"metadata":{"name":"placeholder-node-a","labels":{"sandbox-pool.io/class":"default","sandbox-pool.io/node":"node-a"}},` +
		`"spec":{"classRef":{"name":"default"},"nodeName":"node-a","resourcePolicy":{"resources":{"cpu":"4","memory":"8Gi"}}}}`
	poolStatusJSON = `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool",` +
		`"metadata":{"name":"placeholder-node-a","labels":{"sandbox-pool.io/class":"default","sandbox-pool.io/node":"node-a"}},` +
		`"spec":{"classRef":{"name":"default"},"nodeName":"node-a","resourcePolicy":{"resources":{"cpu":"4","memory":"8Gi"}}},` +
		`"status":{"placeholderPod":{"name":"placeholder-node-a-node-a","uid":"u1","phase":"Running"},` +
		`"nodeCtl":{"connected":true},"conditions":[{"type":"PlaceholderPodReady","status":"True",` +
		`"lastTransitionTime":"2026-11-29T10:00:00Z","reason":"MirrorPodRunning","message":"mirror pod is running"}]}}`
)

func createClass(obj string) *admissionv1.AdmissionRequest {
	return request(admissionv1.Create, v1alpha1.KindSandboxPoolClass, "", admin, []byte(obj), nil)
}

func createPool(obj string) *admissionv1.AdmissionRequest {
	return request(admissionv1.Create, v1alpha1.KindSandboxPool, "", controller, []byte(obj), nil)
}

func updatePoolStatus(who authenticationv1.UserInfo, old, obj string) *admissionv1.AdmissionRequest {
	return request(admissionv1.Update, v1alpha1.KindSandboxPool, "status", who, []byte(obj), []byte(old))
}
