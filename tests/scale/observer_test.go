package scale

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// observer follows the pools and the DaemonSet's pods through one watch of each, so that a
// phase's end is seen without polling the API server; it counts its own requests and the
// events it receives (ownCounter), which the costs leave out.
type observer struct {
	own *ownCounter

	mu     sync.Mutex // guards the fields below
	pools  map[string]*v1alpha1.SandboxPool
	pods   map[string]*corev1.Pod
	start  time.Time
	series []readyPoint
}

// readyPoint is how many pools and DaemonSet pods were Ready at one moment (for the plot).
type readyPoint struct {
	at          time.Duration
	pools, pods int
}

func newObserver(ctx context.Context, t testing.TB, c client.WithWatch) *observer {
	o := &observer{own: newOwnCounter(), pools: map[string]*v1alpha1.SandboxPool{}, pods: map[string]*corev1.Pod{}, start: time.Now()}
	go o.follow(ctx, t, c, "sandboxpools", v1alpha1.KindSandboxPool, func() client.ObjectList { return &v1alpha1.SandboxPoolList{} })
	go o.follow(ctx, t, c, "pods", "Pod", func() client.ObjectList { return &corev1.PodList{} }, client.InNamespace(dsNamespace))
	return o
}

// follow lists and watches one kind, again whenever the watch ends, and keeps the objects.
func (o *observer) follow(ctx context.Context, t testing.TB, c client.WithWatch, resource, kind string, newList func() client.ObjectList, opts ...client.ListOption) {
	for ctx.Err() == nil {
		l := newList()
		o.own.request("LIST", resource)
		if err := c.List(ctx, l, opts...); err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // retry interval after a failed list
			}
			continue
		}
		o.mu.Lock()
		if kind == "Pod" {
			clear(o.pods)
		} else {
			clear(o.pools)
		}
		_ = meta.EachListItem(l, func(obj runtime.Object) error {
			o.keepLocked(obj, false)
			return nil
		})
		o.noteLocked()
		o.mu.Unlock()
		lm, _ := meta.ListAccessor(l)
		o.own.request("WATCH", resource)
		w, err := c.Watch(ctx, newList(), append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()}})...)
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			o.own.event(kind)
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				o.mu.Lock()
				o.keepLocked(ev.Object, ev.Type == watch.Deleted)
				o.noteLocked()
				o.mu.Unlock()
			case watch.Error:
				if ctx.Err() == nil {
					t.Logf("watch of %s: %v (listing again)", resource, ev.Object)
				}
			}
		}
		w.Stop()
	}
}

func (o *observer) keepLocked(obj runtime.Object, deleted bool) {
	switch x := obj.(type) {
	case *v1alpha1.SandboxPool:
		if deleted {
			delete(o.pools, x.Name)
		} else {
			o.pools[x.Name] = x
		}
	case *corev1.Pod:
		if deleted {
			delete(o.pods, x.Name)
		} else {
			o.pods[x.Name] = x
		}
	}
}

// noteLocked adds a point to the series when a Ready count changed.
func (o *observer) noteLocked() {
	p := readyPoint{at: time.Since(o.start)}
	for _, pool := range o.pools {
		if pool.Status.Phase == v1alpha1.PhaseReady {
			p.pools++
		}
	}
	for _, pod := range o.pods {
		if pod.DeletionTimestamp == nil && podRunningAndReady(pod) {
			p.pods++
		}
	}
	if n := len(o.series); n > 0 && o.series[n-1].pools == p.pools && o.series[n-1].pods == p.pods {
		return
	}
	o.series = append(o.series, p)
}

// poolsWhere counts the pools for which keep holds, and how many there are.
func (o *observer) poolsWhere(keep func(*v1alpha1.SandboxPool) bool) (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.pools {
		if keep(p) {
			n++
		}
	}
	return n, len(o.pools)
}

// podsWhere counts the DaemonSet's pods for which keep holds, and how many there are.
func (o *observer) podsWhere(keep func(*corev1.Pod) bool) (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.pods {
		if keep(p) {
			n++
		}
	}
	return n, len(o.pods)
}

// readySeries is a copy of the Ready counts over time.
func (o *observer) readySeries() []readyPoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]readyPoint(nil), o.series...)
}

// podRunningAndReady reports whether the pod is Running with Ready=True.
func podRunningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
