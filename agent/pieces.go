package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// kubeletComponent is the source of kubelet's events.
const kubeletComponent = "kubelet"

// observed is what a pass reads about a pool's lock.
type observed struct {
	pieces []piece
	// mirrors are the pool's placeholder mirror pods by name.
	mirrors map[string]*corev1.Pod
	// files are the pool's manifests by piece number.
	files map[int]manifest.File
	// broken are the numbers of the pool's files that cannot be read as manifests.
	broken []int
	// next is the number of the next piece: above every number on disk and every mirror
	// pod of the node's placeholder pods, so no new piece shares the name of a pod kubelet
	// may still be stopping.
	next int
}

// pieceSpec is the manifest Spec of a piece of pool.
func (a *Agent) pieceSpec(pool *v1alpha1.SandboxPool, number int, res corev1.ResourceList) manifest.Spec {
	return manifest.Spec{
		PoolName: pool.Name, PoolUID: string(pool.UID), ClassName: pool.Spec.ClassRef.Name, NodeName: pool.Spec.NodeName,
		Piece: number, Resources: res, Template: pool.Spec.PlaceholderPod, Namespace: a.opts.PodNamespace,
		Image: a.opts.PauseImage, NetnsEnabled: a.opts.NetnsEnabled,
	}
}

// mirrorName is the name kubelet gives the mirror pod of piece number on this node.
func (a *Agent) mirrorName(number int) string {
	return manifest.PodName(number) + "-" + a.opts.NodeName
}

// observe reads the pool's pieces: the manifests on disk, their mirror pods, what the shim
// said, and, for a piece kubelet has neither admitted nor started, whether it rejected it.
func (a *Agent) observe(ctx context.Context, pool *v1alpha1.SandboxPool) (observed, error) {
	log := logf.FromContext(ctx)
	files, errs := manifest.Pieces(a.opts.ManifestDir, pool.Name)
	for _, err := range errs {
		log.Error(err, "a manifest of the pool cannot be read")
	}
	o := observed{mirrors: map[string]*corev1.Pod{}, files: map[int]manifest.File{}, next: 1}
	if len(errs) > 0 {
		o.broken = a.brokenPieces(pool.Name, files)
	}
	var pods corev1.PodList
	if err := a.client.List(ctx, &pods, client.MatchingFields{indexNode: a.opts.NodeName}); err != nil {
		return o, fmt.Errorf("listing the placeholder pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if n, ok := a.pieceNumber(p.Name); ok && n >= o.next {
			o.next = n + 1
		}
		if p.Annotations[v1alpha1.AnnotationPoolName] == pool.Name {
			o.mirrors[p.Name] = p
		}
	}
	for _, f := range files {
		o.files[f.Piece] = f
		if f.Piece >= o.next {
			o.next = f.Piece + 1
		}
		pc := piece{Number: f.Piece, Res: f.Resources}
		pc.Trusted = f.PoolUID == string(pool.UID) && f.Verify() == nil
		if want, err := manifest.Render(a.pieceSpec(pool, f.Piece, f.Resources)); err == nil {
			pc.Current = bytes.Equal(want, f.Data)
		}
		name := a.mirrorName(f.Piece)
		mirror := o.mirrors[name]
		switch {
		case mirror != nil && mirror.DeletionTimestamp == nil && mirror.Annotations[v1alpha1.AnnotationManifestHash] == f.Hash:
			switch mirror.Status.Phase {
			case corev1.PodFailed, corev1.PodSucceeded:
				pc.State, pc.Reason = pieceRejected, podFailure(mirror)
			case corev1.PodRunning:
				pc.State = pieceAdmitted
				if podReady(mirror) {
					pc.State = pieceRunning
				}
			default:
				pc.State = pieceAdmitted
			}
		case a.shimRuns(name, string(pool.UID)):
			// kubelet runs it (the shim started it and lives) although its mirror pod is
			// gone or being replaced: it still holds its part in kubelet, not yet in the
			// scheduler.
			pc.State, pc.Unseen = pieceRunning, true
		default:
			pc.State = piecePending
			if reason, ok := a.kubeletRejection(ctx, name, f.ModTime); ok {
				pc.State, pc.Reason = pieceRejected, reason
			}
		}
		o.pieces = append(o.pieces, pc)
	}
	a.mu.Lock()
	o.next = max(o.next, a.poolStateLocked(pool.Name).lastPiece+1)
	a.mu.Unlock()
	if o.next > manifest.MaxPiece {
		return o, fmt.Errorf("piece numbers of pool %s are used up (%d): remove its manifests and restart the agent", pool.Name, manifest.MaxPiece)
	}
	return o, nil
}

// brokenPieces are the numbers of the files named as pool's manifests that are not among
// the ones read.
func (a *Agent) brokenPieces(pool string, read []manifest.File) []int {
	entries, err := os.ReadDir(a.opts.ManifestDir)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		key, n, ok := manifest.ParseFileName(e.Name())
		if ok && key == manifest.FileKey(pool) && !slices.ContainsFunc(read, func(f manifest.File) bool { return f.Piece == n }) {
			out = append(out, n)
		}
	}
	return out
}

// pieceNumber returns the piece number of a placeholder mirror pod's name on this node.
func (a *Agent) pieceNumber(mirror string) (int, bool) {
	rest, ok := strings.CutSuffix(mirror, "-"+a.opts.NodeName)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutPrefix(rest, v1alpha1.PlaceholderPodName+"-")
	if !ok {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscanf(rest, "%d", &n); err != nil || manifest.PodName(n) != v1alpha1.PlaceholderPodName+"-"+rest {
		return 0, false
	}
	return n, true
}

// podFailure is a failed pod's reason and message, as kubelet wrote them.
func podFailure(p *corev1.Pod) string {
	switch {
	case p.Status.Reason != "" && p.Status.Message != "":
		return p.Status.Reason + ": " + p.Status.Message
	case p.Status.Reason != "":
		return p.Status.Reason
	case p.Status.Message != "":
		return p.Status.Message
	}
	return "pod " + p.Name + " is " + string(p.Status.Phase)
}

// admissionRejection reports whether reason is one kubelet gives when its admission refuses
// a pod (lifecycle's predicate failures, "OutOf" + a resource name, and the others of
// kubelet's admissionRejectionReasons that can apply to a placeholder pod).
func admissionRejection(reason string) bool {
	switch reason {
	case "UnexpectedAdmissionError", "UnknownReason", "UnexpectedPredicateFailureType", "InvalidNodeInfo",
		"Evicted", "NodeShutdown", "PodOSNotSupported", "PodOSSelectorNodeLabelDoesNotMatch", "TopologyAffinityError":
		return true
	}
	return strings.HasPrefix(reason, "OutOf")
}

// kubeletRejection looks, for a piece kubelet shows nothing of, for kubelet's event saying
// its admission refused it: a rejected static pod gets no mirror pod, so the event is the
// only word of it in the API. Events older than the file are of an earlier pod of the name.
func (a *Agent) kubeletRejection(ctx context.Context, mirror string, written time.Time) (string, bool) {
	var events corev1.EventList
	err := a.reader.List(ctx, &events, client.InNamespace(a.opts.PodNamespace),
		client.MatchingFields{"involvedObject.name": mirror})
	if err != nil {
		logf.FromContext(ctx).V(1).Info("reading kubelet's events of a placeholder pod", "pod", mirror, "error", err.Error())
		return "", false
	}
	since := written.Truncate(time.Second)
	var found *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Type != corev1.EventTypeWarning || !admissionRejection(e.Reason) ||
			(e.Source.Component != kubeletComponent && e.ReportingController != kubeletComponent) {
			continue
		}
		if at := eventTime(e); at.Before(since) || (found != nil && at.Before(eventTime(found))) {
			continue
		}
		found = e
	}
	if found == nil {
		return "", false
	}
	return found.Reason + ": " + found.Message, true
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// roomOnNode reads the node's free room as the scheduler counts it, from the API server:
// allocatable less the requests of every pod bound to the node that has not finished;
// pieces are the numbers of the pool's manifests (its other pods are leaving).
func (a *Agent) roomOnNode(ctx context.Context, pool *v1alpha1.SandboxPool, pieces []int) (*room, error) {
	var node corev1.Node
	if err := a.reader.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, &node); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", a.opts.NodeName, err)
	}
	var pods corev1.PodList
	if err := a.reader.List(ctx, &pods, client.MatchingFields{"spec.nodeName": a.opts.NodeName}); err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", a.opts.NodeName, err)
	}
	names := map[string]bool{}
	for _, n := range pieces {
		names[a.mirrorName(n)] = true
	}
	return roomOf(&node, pods.Items, naming.LabelValue(pool.Name), names), nil
}

// roomOf computes the room from the node and its pods; poolLabel marks this pool's pods,
// and pieces names the mirror pods of its lock's pieces (the others of its pods are leaving).
func roomOf(node *corev1.Node, pods []corev1.Pod, poolLabel string, pieces map[string]bool) *room {
	r := &room{Allocatable: node.Status.Allocatable.DeepCopy(), Free: node.Status.Allocatable.DeepCopy(),
		Holders: map[corev1.ResourceName][]holder{}, Leaving: corev1.ResourceList{}}
	maxPods := node.Status.Allocatable.Pods().Value()
	count := int64(0)
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		count++
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
		own := p.Labels[v1alpha1.LabelPoolName] == poolLabel && poolLabel != ""
		if own && !pieces[p.Name] {
			addTo(r.Leaving, req)
			r.LeavingPods++
		}
		for name, q := range req {
			f := r.Free[name]
			f.Sub(q)
			r.Free[name] = f
			if q.Sign() > 0 {
				r.Holders[name] = append(r.Holders[name], holder{Pod: p.Namespace + "/" + p.Name, Qty: q.DeepCopy(), Own: own})
			}
		}
	}
	r.FreePods = maxPods - count
	for name, hs := range r.Holders {
		slices.SortStableFunc(hs, func(x, y holder) int { return y.Qty.Cmp(x.Qty) })
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
