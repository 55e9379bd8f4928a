package lock

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// room is the node's free room as the scheduler counts it: allocatable less the requests of
// every pod bound to the node that is not finished. Holders says what takes it.
type Room struct {
	Allocatable corev1.ResourceList
	Free        corev1.ResourceList
	// FreePods is how many more pods the node takes.
	FreePods int64
	// Holders are the pods holding the most of each resource, largest first.
	Holders map[corev1.ResourceName][]Holder
	// Leaving is what the pool's own pods hold that are no longer pieces of its lock (their
	// manifests are removed): kubelet stops them and deletes their mirror pods, and the
	// room is free once they are gone.
	Leaving corev1.ResourceList
	// LeavingPods counts those pods.
	LeavingPods int64
}

type Holder struct {
	Pod string
	Qty resource.Quantity
	// Own: one of this pool's placeholder pods.
	Own bool
}

// fitsOnceGone reports whether a pod requesting res fits the room the pool's leaving pods
// free when they are gone.
func (r *Room) FitsOnceGone(res corev1.ResourceList) bool {
	if r.LeavingPods == 0 {
		return false
	}
	after := &Room{Free: r.Free.DeepCopy(), FreePods: r.FreePods + r.LeavingPods}
	AddTo(after.Free, r.Leaving)
	return after.Fits(res)
}

// fits reports whether a pod requesting res fits the free room.
func (r *Room) Fits(res corev1.ResourceList) bool {
	if r.FreePods < 1 {
		return false
	}
	for name, q := range res {
		f := r.Free[name]
		if q.Cmp(f) > 0 {
			return false
		}
	}
	return true
}

// shortfall says, for a person, why a growth does not fit: what the pool asks, what it
// holds, what is free and what holds the rest.
func (r *Room) Shortfall(grow, want, lock corev1.ResourceList) string {
	if r.FreePods < 1 {
		return "growth deferred: the node runs as many pods as it may (allocatable pods)"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(grow)) {
		q := grow[name]
		f := r.Free[name]
		if q.Cmp(f) <= 0 {
			continue
		}
		a, w := r.Allocatable[name], want[name]
		s := fmt.Sprintf("%s: asked %s, the pool holds %s, the node has %s free of %s allocatable",
			name, QuantityText(name, w), QuantityText(name, lock[name]), QuantityText(name, f), QuantityText(name, a))
		if w.Cmp(a) > 0 {
			s += " (more than the node has at all)"
		}
		if hs := r.Holders[name]; len(hs) > 0 {
			var held []string
			for _, h := range hs {
				t := h.Pod + " " + QuantityText(name, h.Qty)
				if h.Own {
					t += " (this pool)"
				}
				held = append(held, t)
			}
			s += "; held by " + strings.Join(held, ", ")
		}
		parts = append(parts, s)
	}
	return "growth deferred until the node has room: " + strings.Join(parts, "; ")
}

// roomOf computes the room from the node and its pods; own tells this pool's placeholder
// pods, and pieces names the mirror pods of its lock's pieces (the others of its pods are
// leaving).
func RoomOf(node *corev1.Node, pods []corev1.Pod, own func(*corev1.Pod) bool, pieces map[string]bool) *Room {
	r := &Room{Allocatable: node.Status.Allocatable.DeepCopy(), Free: node.Status.Allocatable.DeepCopy(),
		Holders: map[corev1.ResourceName][]Holder{}, Leaving: corev1.ResourceList{}}
	maxPods := node.Status.Allocatable.Pods().Value()
	count := int64(0)
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		count++
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
		own := own(p)
		if own && !pieces[p.Name] {
			AddTo(r.Leaving, req)
			r.LeavingPods++
		}
		for name, q := range req {
			f := r.Free[name]
			f.Sub(q)
			r.Free[name] = f
			if q.Sign() > 0 {
				r.Holders[name] = append(r.Holders[name], Holder{Pod: p.Namespace + "/" + p.Name, Qty: q.DeepCopy(), Own: own})
			}
		}
	}
	r.FreePods = maxPods - count
	for name, hs := range r.Holders {
		slices.SortStableFunc(hs, func(x, y Holder) int { return y.Qty.Cmp(x.Qty) })
		r.Holders[name] = hs[:min(len(hs), maxHolders)]
	}
	for name, f := range r.Free {
		if f.Sign() < 0 {
			r.Free[name] = resource.Quantity{Format: f.Format}
		}
	}
	return r
}

// maxHolders is how many pods a deferred growth's reason names per resource.
const maxHolders = 3
