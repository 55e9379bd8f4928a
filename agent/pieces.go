package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// rejectionCheckAfter is how long after a piece's file was written its rejection is first
// looked for in kubelet's events.
const rejectionCheckAfter = pendingRecheck

// kubeletComponent is the source of kubelet's events.
const kubeletComponent = "kubelet"

// observed is what a pass reads about a pool's lock.
type observed struct {
	pieces []lock.Piece
	// mirrors are the pool's placeholder mirror pods by name: only mirror pods of this
	// node's static pods in the placeholder pods' namespace (ownMirror).
	mirrors map[string]*corev1.Pod
	// files are the pool's manifests by piece number.
	files map[int]manifest.File
	// broken are the numbers of the pool's files that cannot be read as manifests.
	broken []int
	// next is the number of the next piece (nextPiece).
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

// ownMirror reports whether p is the mirror pod of one of this node's static pods in the
// placeholder pods' namespace: the only pods that can be pieces of a lock. A pod anyone else
// creates may carry a piece's name, labels, annotations and RuntimeClass, but not all of
// this: only a node may create a mirror pod of its own, and only the cluster's admins may
// create pods in that namespace.
func (a *Agent) ownMirror(p *corev1.Pod) bool {
	return p.Namespace == a.opts.PodNamespace && p.Spec.NodeName == a.opts.NodeName &&
		p.Annotations[manifest.AnnotationConfigMirror] != "" &&
		p.Annotations[manifest.AnnotationConfigSource] == manifest.ConfigSourceFile
}

// mirrorOf reports whether mirror, one of the node's own mirror pods, mirrors the static pod
// of the manifest f: kubelet sets its config.mirror annotation to that pod's UID, the
// manifest's metadata.uid. A manifest of an agent before the UID was set has none; its
// manifest-hash annotation, which the mirror pod carries too, stands in.
func mirrorOf(mirror *corev1.Pod, f manifest.File) bool {
	if f.UID != "" {
		return mirror.Annotations[manifest.AnnotationConfigMirror] == string(f.UID)
	}
	return mirror.Annotations[v1alpha1.AnnotationManifestHash] == f.Hash
}

// observe reads the pool's pieces: the manifests on disk, their mirror pods, what the shim
// said, and, for a piece kubelet has neither admitted nor started, whether it rejected it.
func (a *Agent) observe(ctx context.Context, pool *v1alpha1.SandboxPool) (observed, error) {
	log := logf.FromContext(ctx)
	files, errs := manifest.Pieces(a.opts.ManifestDir, pool.Name)
	for _, err := range errs {
		log.Error(err, "a manifest of the pool cannot be read")
	}
	o := observed{mirrors: map[string]*corev1.Pod{}, files: map[int]manifest.File{}}
	if len(errs) > 0 {
		o.broken = a.brokenPieces(pool.Name, files)
	}
	var pods corev1.PodList
	if err := a.client.List(ctx, &pods, client.MatchingFields{indexNode: a.opts.NodeName}); err != nil {
		return o, fmt.Errorf("listing the placeholder pods: %w", err)
	}
	used := map[int]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !a.ownMirror(p) {
			continue
		}
		if n, ok := a.pieceNumber(p.Name); ok {
			used[n] = true
		}
		if p.Annotations[v1alpha1.AnnotationPoolName] == pool.Name {
			o.mirrors[p.Name] = p
		}
	}
	now := a.opts.Clock.Now()
	for _, f := range files {
		o.files[f.Piece] = f
		used[f.Piece] = true
		o.pieces = append(o.pieces, a.observePiece(ctx, pool, f, o.mirrors[a.mirrorName(f.Piece)], now))
	}
	a.forgetRan(pool.Name, o.files)
	next, err := a.nextPiece(used)
	o.next = next
	if err != nil {
		return o, fmt.Errorf("numbering the next piece of pool %s: %w", pool.Name, err)
	}
	return o, nil
}

// observePiece is what kubelet has made of the piece of the manifest f, given its mirror
// pod (nil when the node has none of its name).
func (a *Agent) observePiece(ctx context.Context, pool *v1alpha1.SandboxPool, f manifest.File, mirror *corev1.Pod, now time.Time) lock.Piece {
	pc := lock.Piece{Number: f.Piece, Res: f.Resources}
	pc.Trusted = f.PoolUID == string(pool.UID) && f.Verify() == nil
	if want, err := manifest.Render(a.pieceSpec(pool, f.Piece, f.Resources)); err == nil {
		pc.Current = bytes.Equal(want, f.Data)
	}
	name := a.mirrorName(f.Piece)
	if mirror != nil && (mirror.DeletionTimestamp != nil || !mirrorOf(mirror, f)) {
		mirror = nil
	}
	// The shim started the static pod of this manifest and its process lives.
	runs := a.shimRuns(name, string(pool.UID), f.UID)
	switch {
	case mirror != nil:
		switch mirror.Status.Phase {
		case corev1.PodFailed, corev1.PodSucceeded:
			pc.State, pc.Reason = lock.Rejected, podFailure(mirror)
		case corev1.PodRunning:
			pc.State = lock.Admitted
			if podReady(mirror) {
				pc.State = lock.Running
			}
		default:
			// A mirror pod kubelet has created again (after a deletion) has no status from
			// kubelet until its next status sync, up to 10 s later: for a piece this agent
			// has seen run, the shim's word that the pod still runs is what kubelet knows
			// already. Once kubelet has written a status, it says. A new piece runs when
			// kubelet says so.
			pc.State = lock.Admitted
			if runs && len(mirror.Status.Conditions) == 0 && a.ranBefore(pool.Name, f.UID) {
				pc.State = lock.Running
			}
		}
	case runs:
		// kubelet runs it (the shim started it and lives) although its mirror pod is
		// gone or being replaced: it still holds its part in kubelet, not yet in the
		// scheduler.
		pc.State, pc.Unseen = lock.Running, true
	default:
		pc.State = lock.Pending
		// kubelet refuses a static pod as it reads its file: a pass right after the write
		// finds no word of it either way (a request for nothing at every new piece). A
		// piece still pending is looked at on the pass after (pendingRecheck).
		if now.Sub(f.ModTime) < rejectionCheckAfter {
			break
		}
		if reason, ok := a.kubeletEvent(ctx, name, f, admissionRejection); ok {
			pc.State, pc.Reason = lock.Rejected, reason
		}
	}
	if pc.State == lock.Running && !pc.Unseen && f.UID != "" {
		a.noteRan(pool.Name, f.UID)
	}
	if pc.Trusted && (pc.State == lock.Pending || pc.State == lock.Admitted) &&
		now.Sub(laterOf(f.ModTime, a.started)) >= a.opts.PieceStartTimeout {
		pc.Unrunnable = true
		pc.Reason = "kubelet has not run it within " + a.opts.PieceStartTimeout.String() + " of its manifest"
		if word, ok := a.kubeletEvent(ctx, name, f, func(string) bool { return true }); ok {
			pc.Reason += "; kubelet's last word: " + word
		}
	}
	return pc
}

// noteRan records that the static pod uid of pool ran, its mirror pod in the API server.
func (a *Agent) noteRan(pool string, uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.poolStateLocked(pool)
	if st.ran == nil {
		st.ran = map[types.UID]bool{}
	}
	st.ran[uid] = true
}

// ranBefore reports whether this agent has seen the static pod uid of pool run.
func (a *Agent) ranBefore(pool string, uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return uid != "" && a.poolStateLocked(pool).ran[uid]
}

// forgetRan drops what the agent remembers of pool's pods that ran, but of the manifests it
// has now.
func (a *Agent) forgetRan(pool string, files map[int]manifest.File) {
	a.mu.Lock()
	defer a.mu.Unlock()
	have := map[types.UID]bool{}
	for _, f := range files {
		have[f.UID] = true
	}
	maps.DeleteFunc(a.poolStateLocked(pool).ran, func(uid types.UID, _ bool) bool { return !have[uid] })
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nextPiece is the number of the next piece: above the highest number the agent has
// written on the node (kept across its restarts) and every number in used (the pool's files
// and the node's own placeholder mirror pods, of any pool), so no new piece shares the name
// of a pod kubelet may still be stopping. Past MaxPiece it takes the lowest number none of
// them uses: numbers cannot run out, whatever names the pods on the node have.
func (a *Agent) nextPiece(used map[int]bool) (int, error) {
	a.mu.Lock()
	n := a.kept.LastPiece + 1
	for name, st := range a.shim {
		if st.Started {
			if m, ok := a.pieceNumber(name); ok {
				used[m] = true
			}
		}
	}
	a.mu.Unlock()
	for u := range used {
		n = max(n, u+1)
	}
	if n <= manifest.MaxPiece {
		return n, nil
	}
	a.usedOnDisk(used)
	for m := 1; m <= manifest.MaxPiece; m++ {
		if !used[m] {
			return m, nil
		}
	}
	return 0, fmt.Errorf("all %d piece numbers are in use on the node", manifest.MaxPiece)
}

// usedOnDisk adds the numbers of every manifest file in the directory, of any pool.
func (a *Agent) usedOnDisk(used map[int]bool) {
	entries, err := os.ReadDir(a.opts.ManifestDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, n, ok := manifest.ParseFileName(e.Name()); ok {
			used[n] = true
		}
	}
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
	if rest == manifest.PodName(0) {
		return 0, true // the single pod of agents before pieces
	}
	rest, ok = strings.CutPrefix(rest, v1alpha1.PlaceholderPodName+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || strconv.Itoa(n) != rest {
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

// kubeletEvent is the newest Warning event kubelet on this node posted about the static pod
// of manifest f (its pod called mirror) whose reason passes match, since f was written: its
// reason and message. A static pod kubelet refuses gets no mirror pod, so an event is the
// only word of it in the API. Only an event that names the static pod's UID (the manifest's
// metadata.uid) and comes from this node's kubelet counts; events older than the file are
// of an earlier pod of the name.
func (a *Agent) kubeletEvent(ctx context.Context, mirror string, f manifest.File, match func(reason string) bool) (string, bool) {
	var events corev1.EventList
	err := a.reader.List(ctx, &events, client.InNamespace(a.opts.PodNamespace),
		client.MatchingFields{"involvedObject.name": mirror})
	if err != nil {
		logf.FromContext(ctx).V(1).Info("reading kubelet's events of a placeholder pod", "pod", mirror, "error", err.Error())
		return "", false
	}
	return newestKubeletEvent(events.Items, a.opts.NodeName, f, match)
}

// newestKubeletEvent is the newest of events that node's kubelet posted about the static
// pod of f since f was written, as a Warning whose reason passes match: its reason and
// message.
func newestKubeletEvent(events []corev1.Event, node string, f manifest.File, match func(reason string) bool) (string, bool) {
	since := f.ModTime.Truncate(time.Second)
	var found *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type != corev1.EventTypeWarning || !match(e.Reason) || !fromKubelet(e, node) ||
			(f.UID != "" && e.InvolvedObject.UID != f.UID) {
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

// fromKubelet reports whether e says it comes from node's kubelet.
func fromKubelet(e *corev1.Event, node string) bool {
	switch {
	case e.Source.Component == kubeletComponent:
		return e.Source.Host == node
	case e.ReportingController == kubeletComponent:
		return e.ReportingInstance == node
	}
	return false
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
func (a *Agent) roomOnNode(ctx context.Context, pool *v1alpha1.SandboxPool, pieces []int) (*lock.Room, error) {
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
	own := func(p *corev1.Pod) bool {
		return a.ownMirror(p) && p.Annotations[v1alpha1.AnnotationPoolName] == pool.Name
	}
	return lock.RoomOf(&node, pods.Items, own, names), nil
}
