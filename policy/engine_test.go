package policy_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

func fields(d policy.Decision) []string {
	out := make([]string, len(d.Violations))
	for i, v := range d.Violations {
		out[i] = v.Field
	}
	return out
}

func TestEvaluate(t *testing.T) {
	ctx := context.Background()
	e := policytest.NewEngine(t, policy.WithInventory(map[string]policy.PoolRef{
		poolName("node-g"): {Class: "gold", NodeName: "node-g"},
	}))

	long := strings.Repeat("n", 250)
	tests := []struct {
		name string
		req  *admissionv1.AdmissionRequest
		// want are the violated fields, sorted; none means allowed.
		want []string
		// msg must appear in the joined message.
		msg string
	}{
		// SandboxPoolClass. Its shape is the schema's; the policy keeps what no schema says.
		{name: "class create", req: createClass(t, newClass())},
		{name: "class zero cpu is the schema's", req: createClass(t, newClass(func(c *v1alpha1.SandboxPoolClass) {
			c.Spec.ResourcePolicy.Resources = wrappers.Resources("0", "8Gi")
		}))},
		{name: "class selector change is the CRD's", req: updateClass(t, newClass(), newClass(func(c *v1alpha1.SandboxPoolClass) {
			c.Spec.Selector.MatchLabels = map[string]string{"pool": "other"}
		}))},
		{name: "class quota change", req: updateClass(t, newClass(), newClass(func(c *v1alpha1.SandboxPoolClass) {
			c.Spec.ResourcePolicy.Resources = wrappers.Resources("500m", "4Gi")
		}))},
		{name: "class quota change by the controller", req: request(t, admissionv1.Update, v1alpha1.ResourceSandboxPoolClasses, "", controller, newClass(func(c *v1alpha1.SandboxPoolClass) {
			c.Spec.ResourcePolicy.Resources = wrappers.Resources("500m", "4Gi")
		}), newClass()), want: []string{"spec"}, msg: "the controller (caller " + policy.DefaultControllerUsername + ") may change a class's finalizers and status only"},
		{name: "class finalizer by the controller", req: request(t, admissionv1.Update, v1alpha1.ResourceSandboxPoolClasses, "", controller, newClass(func(c *v1alpha1.SandboxPoolClass) {
			c.Finalizers = []string{v1alpha1.FinalizerClassPools}
		}), newClass())},
		{name: "class delete", req: request(t, admissionv1.Delete, v1alpha1.ResourceSandboxPoolClasses, "", admin, nil, newClass())},

		// SandboxPool.
		{name: "pool create", req: createPool(t, newPool("node-a"))},
		{name: "pool create long node name", req: createPool(t, newPool(long))},
		{name: "pool create long node name, not hashed", req: createPool(t, newPool(long, func(p *v1alpha1.SandboxPool) {
			p.Name = naming.PoolNamePrefix + long[:naming.MaxUnhashedNodeNameLength]
		})), want: []string{"metadata.name"}, msg: "metadata.name: must be the pool name of spec.nodeName, hashed as its name is longer than 241 characters: " + naming.PoolName(long)},
		{name: "pool wrong name is the schema's", req: createPool(t, newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Name = "placeholder-node-b"
		}))},
		{name: "pool nodeName and classRef immutability is the CRD's", req: updatePool(t, controller, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.NodeName = "node-b"
			p.Spec.ClassRef.Name = "gold"
		}))},
		{name: "pool spec updated by its node", req: updatePool(t, kubelet("node-a"), newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.ResourcePolicy.Resources = wrappers.Resources("64", "256Gi")
		})), want: []string{"spec"}, msg: "may not be modified by node identity system:node:node-a"},
		{name: "pool override by an operator", req: updatePool(t, operator, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.Override = &v1alpha1.Override{Enabled: ptr.To(true), Reason: "OPS-1", ResourcePolicy: v1alpha1.ResourcePolicy{Resources: wrappers.Resources("6", "12Gi")}}
		}))},
		{name: "pool snapshot by an operator", req: updatePool(t, operator, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.ResourcePolicy.Resources = wrappers.Resources("64", "256Gi")
		})), want: []string{"spec.resourcePolicy"}, msg: "the operator role may change spec.override only"},
		{name: "pool override by the controller", req: updatePool(t, controller, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.Override = &v1alpha1.Override{Enabled: ptr.To(false)}
		})), want: []string{"spec.override"}},
		{name: "pool ever-ready by an admin", req: updatePool(t, admin, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Annotations = map[string]string{v1alpha1.AnnotationEverReady: "true"}
		})), want: []string{"metadata.annotations[" + v1alpha1.AnnotationEverReady + "]"}, msg: "the controller's marker"},
		{name: "pool ever-ready by the controller", req: updatePool(t, controller, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Annotations = map[string]string{v1alpha1.AnnotationEverReady: "true"}
		}))},
		{name: "pool class conflict", req: createPool(t, newPool("node-g", func(p *v1alpha1.SandboxPool) {
			p.Spec.ClassRef.Name = "silver"
		})), want: []string{"spec.nodeName"}, msg: "node node-g already belongs to class gold"},
		{name: "pool same class as inventory", req: createPool(t, newPool("node-g", func(p *v1alpha1.SandboxPool) {
			p.Spec.ClassRef.Name = "gold"
		}))},

		// Status scoping.
		{name: "status by its node", req: updateStatus(t, kubelet("node-b"), withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			st.PoolInfo.Zone = "z2"
			st.Resize = v1alpha1.ResizeStatus{Status: v1alpha1.ResizeInProgress}
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionResizeInProgress.String(), metav1.ConditionTrue))
		}))},
		{name: "status by its node's Lease identity", req: updateStatus(t, leaseServiceAccount("node-b"), withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionFalse))
		})), want: []string{"status"}},
		{name: "status by another node", req: updateStatus(t, kubelet("node-a"), withStatus("node-b"), withStatus("node-b")), want: []string{"status"},
			msg: "status of pool placeholder-node-b may only be written by node node-b or the controller; caller system:node:node-a is neither"},
		{name: "status by an admin", req: updateStatus(t, admin, withStatus("node-b"), withStatus("node-b")), want: []string{"status"}, msg: "caller kubernetes-admin is neither"},
		{name: "status phase by node", req: updateStatus(t, kubelet("node-b"), withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			st.Phase = v1alpha1.PhaseDegraded
		})), want: []string{"status.phase"}, msg: "status.phase: owned by the controller; node node-b"},
		{name: "status controller conditions by node", req: updateStatus(t, kubelet("node-b"), withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse))
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionFalse))
		})), want: []string{"status.conditions[type=NodeNotFound]", "status.conditions[type=PlaceholderAgentHealthy]"}},
		{name: "status by controller", req: updateStatus(t, controller, withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			st.Phase = v1alpha1.PhaseUnready
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionPlaceholderAgentHealthy.String(), metav1.ConditionFalse))
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionNodeNotFound.String(), metav1.ConditionTrue))
		}))},
		{name: "status agent fields by controller", req: updateStatus(t, controller, withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
			st.Phase = v1alpha1.PhaseDegraded
			st.PoolInfo = nil
			st.LastAppliedGeneration = ptr.To(int64(2))
			meta.SetStatusCondition(&st.Conditions, condition(v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionFalse))
		})), want: []string{"status.conditions[type=NodeCtlHealthy]", "status.lastAppliedGeneration", "status.poolInfo"},
			msg: "status.poolInfo: owned by the placeholder agent of node node-b; the controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := e.Evaluate(ctx, tt.req)
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if got := fields(d); !slices.Equal(got, tt.want) {
				t.Errorf("violated fields = %q, want %q\nmessage: %s", got, tt.want, d.Message())
			}
			if d.Allowed != (len(tt.want) == 0) {
				t.Errorf("Allowed = %v with %d violations", d.Allowed, len(d.Violations))
			}
			if !strings.Contains(d.Message(), tt.msg) {
				t.Errorf("message %q does not contain %q", d.Message(), tt.msg)
			}
		})
	}
}

// TestInventory checks that inventory updates reach the policy.
func TestInventory(t *testing.T) {
	ctx := context.Background()
	e := policytest.NewEngine(t)
	silver := createPool(t, newPool("node-a", func(p *v1alpha1.SandboxPool) { p.Spec.ClassRef.Name = "silver" }))
	allowed := func(want bool) {
		t.Helper()
		d, err := e.Evaluate(ctx, silver)
		if err != nil {
			t.Fatalf("Evaluate: %v", err)
		}
		if d.Allowed != want {
			t.Fatalf("Allowed = %v, want %v (%s)", d.Allowed, want, d.Message())
		}
	}
	allowed(true)
	if err := e.SetInventory(ctx, map[string]policy.PoolRef{"placeholder-node-a": {Class: "default", NodeName: "node-a"}}); err != nil {
		t.Fatal(err)
	}
	allowed(false)
	if err := e.DeletePool(ctx, "placeholder-node-a"); err != nil {
		t.Fatal(err)
	}
	allowed(true)
	if err := e.DeletePool(ctx, "placeholder-node-a"); err != nil {
		t.Fatalf("deleting a missing pool: %v", err)
	}
	if err := e.UpsertPool(ctx, "placeholder-node-a", policy.PoolRef{Class: "gold", NodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	allowed(false)
	if err := e.UpsertPool(ctx, "placeholder-node-a", policy.PoolRef{Class: "silver", NodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	allowed(true)

	// Two pools on the node (a stray name): removing one leaves the other's conflict.
	if err := e.UpsertPool(ctx, "stray", policy.PoolRef{Class: "gold", NodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	allowed(false)
	if err := e.DeletePool(ctx, "placeholder-node-a"); err != nil {
		t.Fatal(err)
	}
	allowed(false)
	// A pool that moves to another node leaves the old node's index entry.
	if err := e.UpsertPool(ctx, "stray", policy.PoolRef{Class: "gold", NodeName: "node-x"}); err != nil {
		t.Fatal(err)
	}
	allowed(true)
	if err := e.UpsertPool(ctx, "stray", policy.PoolRef{Class: "gold", NodeName: "node-x"}); err != nil {
		t.Fatalf("idempotent upsert: %v", err)
	}
	if err := e.SetInventory(ctx, nil); err != nil {
		t.Fatal(err)
	}
	allowed(true)
}

// TestConfig checks that the controller and operator identities come from the config.
func TestConfig(t *testing.T) {
	ctx := context.Background()
	e := policytest.NewEngine(t)
	bySA := updateStatus(t, controller, withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
		st.Phase = v1alpha1.PhaseUnready
	}))
	byGroup := updateStatus(t, admin, withStatus("node-b"), withStatus("node-b", func(st *v1alpha1.SandboxPoolStatus) {
		st.Phase = v1alpha1.PhaseUnready
	}))
	snapshot := func(who authenticationv1.UserInfo) *admissionv1.AdmissionRequest {
		return updatePool(t, who, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
			p.Spec.ResourcePolicy.Resources = wrappers.Resources("64", "256Gi")
		}))
	}
	check := func(req *admissionv1.AdmissionRequest, want bool) {
		t.Helper()
		d, err := e.Evaluate(ctx, req)
		if err != nil {
			t.Fatalf("Evaluate: %v", err)
		}
		if d.Allowed != want {
			t.Errorf("Allowed = %v, want %v (%s)", d.Allowed, want, d.Message())
		}
	}
	check(bySA, true)
	check(byGroup, false)
	check(snapshot(operator), false)
	check(snapshot(admin), true)

	if err := e.SetConfig(ctx, policy.Config{ControllerGroups: admin.Groups, OperatorUsernames: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	check(bySA, false)
	check(byGroup, true)
	check(snapshot(operator), true)
	check(snapshot(authenticationv1.UserInfo{Username: "bob"}), false)

	for name, c := range map[string]policy.Config{
		"no controller identity":               {},
		"a user both controller and operator":  {ControllerUsernames: []string{"x"}, OperatorUsernames: []string{"x"}},
		"a group both controller and operator": {ControllerGroups: []string{"g"}, OperatorGroups: []string{"g"}},
	} {
		if err := e.SetConfig(ctx, c); err == nil {
			t.Errorf("SetConfig accepted %s", name)
		}
	}
	if _, err := policy.New(ctx, policy.WithConfig(policy.Config{})); err == nil {
		t.Error("New accepted a config without a controller identity")
	}
}

// TestSortedViolations checks that violations come sorted by field, then message.
func TestSortedViolations(t *testing.T) {
	e := policytest.NewEngine(t)
	req := updatePool(t, admin, newPool("node-a"), newPool("node-a", func(p *v1alpha1.SandboxPool) {
		p.Labels[v1alpha1.LabelNode] = "node-b"
		p.Labels[v1alpha1.LabelClass] = "gold"
	}))
	d, err := e.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"metadata.labels[" + v1alpha1.LabelClass + "]", "metadata.labels[" + v1alpha1.LabelNode + "]"}
	if got := fields(d); !slices.Equal(got, want) {
		t.Errorf("fields = %q, want %q", got, want)
	}
	if want := "metadata.labels[" + v1alpha1.LabelClass + "]: the controller's marker; kubernetes-admin may not set, change or remove it; " +
		"metadata.labels[" + v1alpha1.LabelNode + "]: the controller's marker; kubernetes-admin may not set, change or remove it"; d.Message() != want {
		t.Errorf("Message() = %q, want %q", d.Message(), want)
	}
}

func TestEvaluateErrors(t *testing.T) {
	ctx := context.Background()
	e := policytest.NewEngine(t)
	if _, err := e.Evaluate(ctx, nil); err == nil {
		t.Error("Evaluate(nil) returned no error")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if d, err := e.Evaluate(canceled, createClass(t, newClass())); !errors.Is(err, context.Canceled) {
		t.Errorf("Evaluate with a canceled context = %+v, %v; want context.Canceled", d, err)
	}
}

// TestConcurrentUse evaluates while the inventory changes (run with -race).
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	e := policytest.NewEngine(t)
	req := createPool(t, newPool("node-a"))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, err := e.Evaluate(ctx, req); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			ref := policy.PoolRef{Class: "default", NodeName: "node-a"}
			if i%2 == 1 {
				ref.Class = "gold"
			}
			if err := e.UpsertPool(ctx, "placeholder-node-a", ref); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
