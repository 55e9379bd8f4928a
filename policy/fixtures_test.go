package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// Callers.
var (
	admin      = authenticationv1.UserInfo{Username: "kubernetes-admin", Groups: []string{user.SystemPrivilegedGroup}}
	controller = authenticationv1.UserInfo{
		Username: policy.DefaultControllerUsername,
		Groups:   []string{user.AllAuthenticated},
	}
	operator = authenticationv1.UserInfo{Username: "olivia", Groups: []string{policy.DefaultOperatorGroup, user.AllAuthenticated}}
)

func kubelet(node string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: "system:node:" + node, Groups: []string{user.NodesGroup, user.AllAuthenticated}}
}

// leaseServiceAccount is node's Lease identity, which renews its pool's Lease only.
func leaseServiceAccount(node string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{
		Username: serviceaccount.MakeUsername(v1alpha1.DefaultLeaseNamespace, v1alpha1.LeaseServiceAccountPrefix+node),
		Groups:   serviceaccount.MakeGroupNames(v1alpha1.DefaultLeaseNamespace),
	}
}

// poolName is the deterministic pool name of docs/design.md §2, restated here so that the test
// checks the Rego implementation against an independent one.
func poolName(node string) string {
	if len(node) <= 241 {
		return "placeholder-" + node
	}
	sum := sha256.Sum256([]byte(node))
	return "placeholder-" + node[:232] + "-" + hex.EncodeToString(sum[:])[:8]
}

// newClass is the suite's class, "default", changed by mutate.
func newClass(mutate ...func(*v1alpha1.SandboxPoolClass)) *v1alpha1.SandboxPoolClass {
	c := wrappers.MakeClass("default").Selector("sandbox.agentcube.io/pool", "default").
		Resources("4", "8Gi").RuntimeClass("placeholder").Obj()
	for _, m := range mutate {
		m(c)
	}
	return c
}

// newPool is node's pool of the suite's class, named by poolName (not naming.PoolName:
// the Rego is checked against an independent implementation), changed by mutate.
func newPool(node string, mutate ...func(*v1alpha1.SandboxPool)) *v1alpha1.SandboxPool {
	p := wrappers.MakePool(node).Name(poolName(node)).Class("default").
		Label(v1alpha1.LabelClass, "default").Label(v1alpha1.LabelNode, node).Resources("4", "8Gi").Obj()
	for _, m := range mutate {
		m(p)
	}
	return p
}

func condition(t string, s metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: "Test", LastTransitionTime: metav1.Unix(1_800_000_000, 0)}
}

// withStatus is node's pool with a full status written by both owners.
func withStatus(node string, mutate ...func(*v1alpha1.SandboxPoolStatus)) *v1alpha1.SandboxPool {
	return newPool(node, func(p *v1alpha1.SandboxPool) {
		p.Status = v1alpha1.SandboxPoolStatus{
			Phase:                 v1alpha1.PhaseReady,
			PlaceholderPod:        &v1alpha1.PlaceholderPodStatus{Name: poolName(node) + "-" + node, UID: "u1", Phase: "Running"},
			PlaceholderAgent:      &v1alpha1.PlaceholderAgentStatus{Version: "v0.1.0"},
			NodeCtl:               &v1alpha1.NodeCtlStatus{Connected: ptr.To(true)},
			PoolInfo:              &v1alpha1.PoolInfo{Zone: "z1", AllocatableMemoryBytes: ptr.To(int64(8 << 30))},
			LastAppliedGeneration: ptr.To(int64(1)),
			Conditions: []metav1.Condition{
				condition(v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionTrue),
				condition(v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionTrue),
				condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionTrue),
			},
		}
		for _, m := range mutate {
			m(&p.Status)
		}
	})
}

func raw(t testing.TB, obj any) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("encoding %T: %v", obj, err)
	}
	return runtime.RawExtension{Raw: b}
}

func request(t testing.TB, op admissionv1.Operation, res, sub string, who authenticationv1.UserInfo, obj, old metav1.Object) *admissionv1.AdmissionRequest {
	t.Helper()
	kind := v1alpha1.KindSandboxPool
	if res == v1alpha1.ResourceSandboxPoolClasses {
		kind = v1alpha1.KindSandboxPoolClass
	}
	name := ""
	var newObj, oldObj any
	if obj != nil {
		name, newObj = obj.GetName(), obj
	}
	if old != nil {
		name, oldObj = old.GetName(), old
	}
	return &admissionv1.AdmissionRequest{
		UID:         "705ab4f5-6393-11e8-b7cc-42010a800002",
		Kind:        metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: kind},
		Resource:    metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: res},
		SubResource: sub,
		Name:        name,
		Operation:   op,
		UserInfo:    who,
		Object:      raw(t, newObj),
		OldObject:   raw(t, oldObj),
	}
}

func createClass(t testing.TB, c *v1alpha1.SandboxPoolClass) *admissionv1.AdmissionRequest {
	return request(t, admissionv1.Create, v1alpha1.ResourceSandboxPoolClasses, "", admin, c, nil)
}

func updateClass(t testing.TB, old, c *v1alpha1.SandboxPoolClass) *admissionv1.AdmissionRequest {
	return request(t, admissionv1.Update, v1alpha1.ResourceSandboxPoolClasses, "", admin, c, old)
}

func createPool(t testing.TB, p *v1alpha1.SandboxPool) *admissionv1.AdmissionRequest {
	return request(t, admissionv1.Create, v1alpha1.ResourceSandboxPools, "", controller, p, nil)
}

func updatePool(t testing.TB, who authenticationv1.UserInfo, old, p *v1alpha1.SandboxPool) *admissionv1.AdmissionRequest {
	return request(t, admissionv1.Update, v1alpha1.ResourceSandboxPools, "", who, p, old)
}

func updateStatus(t testing.TB, who authenticationv1.UserInfo, old, p *v1alpha1.SandboxPool) *admissionv1.AdmissionRequest {
	return request(t, admissionv1.Update, v1alpha1.ResourceSandboxPools, "status", who, p, old)
}
