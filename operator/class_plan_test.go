package operator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

func testSnapshot(cpu string) Snapshot {
	return Snapshot{
		ResourcePolicy: v1alpha1.ResourcePolicy{Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi"),
		}},
		PlaceholderPod: v1alpha1.PlaceholderPodTemplate{RuntimeClassName: "placeholder"},
	}
}

func TestPlanClass(t *testing.T) {
	class := wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	sel := labels.SelectorFromSet(labels.Set{"pool": "a"})
	snap := testSnapshot("2")
	inSync := newPool(class, "in-sync", snap)
	stale := newPool(class, "stale", testSnapshot("1"))
	unlabelled := newPool(class, "unlabelled", snap)
	delete(unlabelled.Labels, v1alpha1.LabelClass)
	offSelector := newPool(class, "relabelled", snap)
	nodeGone := newPool(class, "gone", snap)
	terminating := newPool(class, "terminating", testSnapshot("1"))
	terminating.DeletionTimestamp = &metav1.Time{}
	otherClass := newPool(wrappers.MakeClass("b").UID("uid-b").Selector("pool", "b").Resources("2", "4Gi").Obj(), "taken", snap)

	nodes := map[string]nodeView{}
	for _, n := range []string{"in-sync", "stale", "unlabelled", "new-1", "new-2", "taken", "terminating"} {
		nodes[n] = nodeView{Name: n, Labels: map[string]string{"pool": "a"}}
	}
	nodes["relabelled"] = nodeView{Name: "relabelled", Labels: map[string]string{"pool": "other"}}
	nodes["unselected"] = nodeView{Name: "unselected"}

	p := planClass(planInput{
		Class: class, Selector: sel, Snapshot: snap, Nodes: nodes,
		Pools: []*v1alpha1.SandboxPool{inSync, stale, unlabelled, offSelector, nodeGone, terminating},
		PoolOfNode: func(node string) *v1alpha1.SandboxPool {
			if node == "taken" {
				return otherClass
			}
			return nil
		},
	})
	if want := []string{"new-1", "new-2"}; !slices.Equal(p.create, want) {
		t.Errorf("create = %v, want %v", p.create, want)
	}
	var updated []string
	for _, u := range p.update {
		updated = append(updated, u.Spec.NodeName)
		if u.Labels[v1alpha1.LabelClass] != "a" || !u.Spec.ResourcePolicy.Resources.Cpu().Equal(resource.MustParse("2")) {
			t.Errorf("update of %s is not the desired pool: labels %v, resources %v", u.Name, u.Labels, u.Spec.ResourcePolicy.Resources)
		}
	}
	slices.Sort(updated)
	if want := []string{"stale", "unlabelled"}; !slices.Equal(updated, want) {
		t.Errorf("update = %v, want %v (in sync, terminating and node-gone pools are left alone)", updated, want)
	}
	if len(p.remove) != 1 || p.remove[0].Spec.NodeName != "relabelled" {
		t.Errorf("remove = %v, want only the pool of the relabelled node (a pool whose node is gone stays)", p.remove)
	}
	if want := []nodeConflict{{Node: "taken", Pool: naming.PoolName("taken"), Class: "b"}}; !slices.Equal(p.conflicts, want) {
		t.Errorf("conflicts = %v, want %v", p.conflicts, want)
	}
}

func TestDesiredPoolKeepsWhatTheClassDoesNotOwn(t *testing.T) {
	class := wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	pool := newPool(class, "n1", testSnapshot("1"))
	pool.Labels["team"] = "x"
	pool.Spec.Override = &v1alpha1.Override{Enabled: ptr.To(true), Reason: "bigger"}
	want, changed := desiredPool(class, pool, testSnapshot("2"))
	if !changed {
		t.Fatal("a changed snapshot must be reported as a change")
	}
	if want.Labels["team"] != "x" || want.Spec.Override == nil || !*want.Spec.Override.Enabled {
		t.Errorf("desiredPool dropped fields the class does not own: labels %v, override %v", want.Labels, want.Spec.Override)
	}
	if pool.Spec.ResourcePolicy.Resources.Cpu().String() != "1" {
		t.Error("desiredPool modified its input")
	}
	if _, changed := desiredPool(class, want, testSnapshot("2")); changed {
		t.Error("desiredPool of a pool already in the desired state reports a change")
	}
	if !metav1.IsControlledBy(want, class) || !slices.Contains(want.Finalizers, v1alpha1.FinalizerPoolPlaceholderPod) {
		t.Errorf("owner %v / finalizers %v missing", want.OwnerReferences, want.Finalizers)
	}
}

func TestSlowStartBatch(t *testing.T) {
	for _, tc := range []struct {
		count, failAt int
		wantCalls     int
		wantOK        int
	}{
		{count: 0, failAt: -1, wantCalls: 0, wantOK: 0},
		{count: 10, failAt: -1, wantCalls: 10, wantOK: 10},
		// Batches 1, 2, 4: a failure in the third batch (indexes 3..6) stops before 7..9.
		{count: 10, failAt: 4, wantCalls: 7, wantOK: 6},
		// A failure in the first batch costs one call.
		{count: 50, failAt: 0, wantCalls: 1, wantOK: 0},
	} {
		var calls atomic.Int32
		var mu sync.Mutex
		var batchOf []int
		ok, _, err := slowStartBatch(tc.count, 1, func(i int) error {
			calls.Add(1)
			mu.Lock()
			batchOf = append(batchOf, i)
			mu.Unlock()
			if i == tc.failAt {
				return errors.New("boom")
			}
			return nil
		})
		if int(calls.Load()) != tc.wantCalls || ok != tc.wantOK || (err != nil) != (tc.failAt >= 0) {
			t.Errorf("count %d failAt %d: calls %d ok %d err %v; want calls %d ok %d", tc.count, tc.failAt, calls.Load(), ok, err, tc.wantCalls, tc.wantOK)
		}
	}
}

func TestDecideRelease(t *testing.T) {
	deleted := metav1.Now().Time
	const timeout = 10 * time.Minute
	for _, tc := range []struct {
		name       string
		pods       int
		nodeExists bool
		elapsed    float64 // minutes
		want       releaseCause
	}{
		{"pod gone", 0, true, 0, releasePodGone},
		{"pod gone, node gone", 0, false, 0, releasePodGone},
		{"node gone", 1, false, 0, releaseNodeGone},
		{"pod present, just before the timeout", 1, true, 9.99, keepFinalizer},
		{"pod present, at the timeout", 1, true, 10, releaseTimeout},
		{"pod present, after the timeout", 2, true, 11, releaseTimeout},
	} {
		now := deleted.Add(timeDuration(tc.elapsed))
		got, wait := decideRelease(tc.pods, tc.nodeExists, deleted, now, timeout)
		if got != tc.want {
			t.Errorf("%s: cause %q, want %q", tc.name, got, tc.want)
		}
		if got == keepFinalizer && wait != deleted.Add(timeout).Sub(now) {
			t.Errorf("%s: wait %s, want the time left until the timeout", tc.name, wait)
		}
	}
}

func TestBuildSnapshot(t *testing.T) {
	s, err := schema.Compiled()
	if err != nil {
		t.Fatal(err)
	}
	sch, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(sch).WithObjects(
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-high"}, Value: 1000},
	).Build()
	ctx := context.Background()

	class := wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	snap, err := buildSnapshot(ctx, c, s, class)
	if err != nil {
		t.Fatal(err)
	}
	// The default comes from schema/*.cue, not from Go.
	if snap.PlaceholderPod.RuntimeClassName != "placeholder" {
		t.Errorf("runtimeClassName = %q, want the schema default placeholder", snap.PlaceholderPod.RuntimeClassName)
	}

	class.Spec.PlaceholderPod.PriorityClassName = "sandbox-high"
	class.Spec.PlaceholderPod.Priority = ptr.To[int32](5)
	snap, err = buildSnapshot(ctx, c, s, class)
	if err != nil {
		t.Fatal(err)
	}
	if snap.PlaceholderPod.Priority == nil || *snap.PlaceholderPod.Priority != 1000 || snap.PlaceholderPod.PriorityClassName != "sandbox-high" {
		t.Errorf("priority %v / %q, want 1000 from the PriorityClass and its name", snap.PlaceholderPod.Priority, snap.PlaceholderPod.PriorityClassName)
	}

	class.Spec.PlaceholderPod.PriorityClassName = "absent"
	if _, err := buildSnapshot(ctx, c, s, class); !errors.Is(err, errPriorityClassNotFound) {
		t.Errorf("a missing PriorityClass gave %v, want errPriorityClassNotFound", err)
	}

	class = wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	class.Spec.ResourcePolicy.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	var verr *schema.ValidationError
	if _, err := buildSnapshot(ctx, c, s, class); !errors.As(err, &verr) {
		t.Errorf("a policy without memory gave %v, want the schema's validation error", err)
	}
}

func timeDuration(minutes float64) time.Duration {
	return time.Duration(minutes * float64(time.Minute))
}

func TestSlowStartBatchFromInitialAndLastBatch(t *testing.T) {
	var calls atomic.Int32
	ok, last, err := slowStartBatch(20, 4, func(int) error { calls.Add(1); return nil })
	// Batches 4, 8, 8 (the rest): the largest is 8.
	if ok != 20 || last != 8 || err != nil || calls.Load() != 20 {
		t.Errorf("ok %d last %d err %v calls %d; want 20, 8, nil, 20", ok, last, err, calls.Load())
	}
	// Batches 4, 8 and the remaining 9: the largest full batch, not the remainder.
	if ok, last, _ := slowStartBatch(21, 4, func(int) error { return nil }); ok != 21 || last != 9 {
		t.Errorf("ok %d last %d; want 21, 9", ok, last)
	}
	if ok, last, _ := slowStartBatch(13, 4, func(int) error { return nil }); ok != 13 || last != 8 { // 4, 8, then 1
		t.Errorf("ok %d last %d; want 13, 8", ok, last)
	}
	// Batches 1, 2 succeed; the batch of 4 (3..6) fails at 5.
	ok, last, err = slowStartBatch(20, 1, func(i int) error {
		if i == 5 {
			return errors.New("boom")
		}
		return nil
	})
	if ok != 6 || last != 2 || err == nil {
		t.Errorf("ok %d last %d err %v; want 6, 2, an error", ok, last, err)
	}
}
