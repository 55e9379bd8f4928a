package ssa

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func TestStatusChanged(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	cond := func(typ v1alpha1.ConditionType, s metav1.ConditionStatus, at metav1.Time) metav1.Condition {
		return metav1.Condition{Type: typ.String(), Status: s, Reason: "R", Message: "m", ObservedGeneration: 1, LastTransitionTime: at}
	}
	base := v1alpha1.SandboxPoolStatus{
		Phase:            v1alpha1.PhaseReady,
		PlaceholderAgent: &v1alpha1.PlaceholderAgentStatus{Version: "v1", LastHeartbeat: &t0},
		NodeCtl:          &v1alpha1.NodeCtlStatus{Connected: ptr.To(true), LastHeartbeat: &t0},
		Conditions: []metav1.Condition{cond(v1alpha1.ConditionNodeNotFound, metav1.ConditionFalse, t0),
			cond(v1alpha1.ConditionPlaceholderAgentHealthy, metav1.ConditionTrue, t0)},
	}
	heartbeats := []string{"placeholderAgent.lastHeartbeat", "nodeCtl.lastHeartbeat"}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.SandboxPoolStatus)
		ignore []string
		want   bool
	}{
		{"nothing", func(*v1alpha1.SandboxPoolStatus) {}, nil, false},
		{"a transition time", func(s *v1alpha1.SandboxPoolStatus) { s.Conditions[0].LastTransitionTime = t1 }, nil, false},
		{"the conditions' order", func(s *v1alpha1.SandboxPoolStatus) {
			s.Conditions[0], s.Conditions[1] = s.Conditions[1], s.Conditions[0]
		}, nil, false},
		{"an ignored heartbeat", func(s *v1alpha1.SandboxPoolStatus) { s.NodeCtl.LastHeartbeat = &t1 }, heartbeats, false},
		{"an ignored heartbeat dropped", func(s *v1alpha1.SandboxPoolStatus) { s.PlaceholderAgent.LastHeartbeat = nil }, heartbeats, false},
		{"a heartbeat not ignored", func(s *v1alpha1.SandboxPoolStatus) { s.NodeCtl.LastHeartbeat = &t1 }, nil, true},
		{"the phase", func(s *v1alpha1.SandboxPoolStatus) { s.Phase = v1alpha1.PhaseDegraded }, heartbeats, true},
		{"a condition's status", func(s *v1alpha1.SandboxPoolStatus) { s.Conditions[1].Status = metav1.ConditionFalse }, heartbeats, true},
		{"a condition's message", func(s *v1alpha1.SandboxPoolStatus) { s.Conditions[1].Message = "other" }, heartbeats, true},
		{"a condition's observed generation", func(s *v1alpha1.SandboxPoolStatus) { s.Conditions[1].ObservedGeneration = 2 }, heartbeats, true},
		{"a condition more", func(s *v1alpha1.SandboxPoolStatus) {
			s.Conditions = append(s.Conditions, cond(v1alpha1.ConditionNodeCtlHealthy, metav1.ConditionTrue, t0))
		}, heartbeats, true},
		{"a field beside a heartbeat", func(s *v1alpha1.SandboxPoolStatus) { s.NodeCtl.Connected = ptr.To(false) }, heartbeats, true},
		{"a field gone", func(s *v1alpha1.SandboxPoolStatus) { s.NodeCtl = nil }, heartbeats, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := *base.DeepCopy()
			tc.change(&want)
			if got := StatusChanged(&base, &want, tc.ignore...); got != tc.want {
				t.Errorf("StatusChanged = %v, want %v", got, tc.want)
			}
		})
	}
	var never *v1alpha1.SandboxPoolStatus
	if !StatusChanged(never, &base) {
		t.Error("StatusChanged(nil, status) = false, want true: nothing applied yet")
	}
}

// TestApply checks what each apply sends: the object's kind and name, the owner's fields
// only, the field manager, and no force.
func TestApply(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	type sent struct {
		subresource string
		patch       map[string]any
		manager     string
		force       bool
	}
	var got []sent
	record := func(sub string, patch client.Patch, manager string, force *bool) error {
		if patch.Type() != types.ApplyPatchType {
			return errors.New("not an apply")
		}
		data, err := patch.Data(nil)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		got = append(got, sent{sub, m, manager, ptr.Deref(force, false)})
		return nil
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, _ client.Object, patch client.Patch, opts ...client.PatchOption) error {
			o := (&client.PatchOptions{}).ApplyOptions(opts)
			return record("", patch, o.FieldManager, o.Force)
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, sub string, _ client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			o := (&client.SubResourcePatchOptions{}).ApplyOptions(opts)
			return record(sub, patch, o.FieldManager, o.Force)
		},
	}).Build()

	ctx := context.Background()
	pool := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-n1", ResourceVersion: "7",
		Labels: map[string]string{"kept": "out"}}, Spec: v1alpha1.SandboxPoolSpec{NodeName: "n1"}}
	if err := ApplyStatus(ctx, c, pool, &v1alpha1.SandboxPoolStatus{Phase: v1alpha1.PhaseReady}, v1alpha1.FieldManagerController); err != nil {
		t.Fatal(err)
	}
	if err := ApplyAnnotations(ctx, c, pool, map[string]string{v1alpha1.AnnotationEverReady: "true"}, v1alpha1.FieldManagerController); err != nil {
		t.Fatal(err)
	}
	gv := v1alpha1.SchemeGroupVersion.String()
	want := []sent{
		{"status", map[string]any{"apiVersion": gv, "kind": v1alpha1.KindSandboxPool,
			"metadata": map[string]any{"name": "placeholder-n1"}, "status": map[string]any{"phase": "Ready"}}, v1alpha1.FieldManagerController, false},
		{"", map[string]any{"apiVersion": gv, "kind": v1alpha1.KindSandboxPool,
			"metadata": map[string]any{"name": "placeholder-n1", "annotations": map[string]any{v1alpha1.AnnotationEverReady: "true"}}},
			v1alpha1.FieldManagerController, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sent\n%+v\nwant\n%+v", got, want)
	}
}
