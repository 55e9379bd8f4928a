package operator

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestNodeEventsEnqueueOnlyClassesWhoseSelectionChanges: the DaemonSet rule that node
// updates not changing whether a node matches are ignored.
func TestNodeEventsEnqueueOnlyClassesWhoseSelectionChanges(t *testing.T) {
	sch, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	a := wrappers.MakeClass("a").UID("uid-a").Selector("pool", "a").Resources("2", "4Gi").Obj()
	b := wrappers.MakeClass("b").UID("uid-b").Selector("pool", "b").Resources("2", "4Gi").Obj()
	r := &ClassReconciler{Client: fake.NewClientBuilder().WithScheme(sch).WithObjects(a, b).Build()}
	h := r.nodeEvents()
	node := func(labels map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, ResourceVersion: "1"}}
	}
	drain := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
		var names []string
		for q.Len() > 0 {
			req, _ := q.Get()
			names = append(names, req.Name)
			q.Done(req)
		}
		slices.Sort(names)
		return names
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		old, new map[string]string
		want     []string
	}{
		{"heartbeat (labels unchanged)", map[string]string{"pool": "a"}, map[string]string{"pool": "a"}, nil},
		{"unrelated label added", map[string]string{"pool": "a"}, map[string]string{"pool": "a", "zone": "z1"}, nil},
		{"relabelled from a to b", map[string]string{"pool": "a"}, map[string]string{"pool": "b"}, []string{"a", "b"}},
		{"label removed", map[string]string{"pool": "a"}, nil, []string{"a"}},
		{"label added", nil, map[string]string{"pool": "b", "zone": "z1"}, []string{"b"}},
	} {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		h.Update(ctx, event.UpdateEvent{ObjectOld: node(tc.old), ObjectNew: node(tc.new)}, q)
		if got := drain(q); !slices.Equal(got, tc.want) {
			t.Errorf("%s: enqueued %v, want %v", tc.name, got, tc.want)
		}
		q.ShutDown()
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h.Create(ctx, event.CreateEvent{Object: node(map[string]string{"pool": "b"})}, q)
	h.Delete(ctx, event.DeleteEvent{Object: node(map[string]string{"pool": "a"})}, q)
	h.Create(ctx, event.CreateEvent{Object: node(map[string]string{"pool": "none"})}, q)
	if got := drain(q); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("create of a b node and delete of an a node enqueued %v, want [a b]", got)
	}
}
