package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func testAgent(t *testing.T) *Agent {
	t.Helper()
	o := DefaultOptions()
	o.NodeName, o.ManifestDir, o.StateFile = "node-a", t.TempDir(), filepath.Join(t.TempDir(), "state", "agent.json")
	o.NodeCtlConfig = filepath.Join(t.TempDir(), "node-ctl.json")
	return newAgent(nil, o, nil, nil)
}

// TestOwnMirror: only a mirror pod of one of the node's static pods in the placeholder pods'
// namespace is the node's own, and it mirrors a manifest only with that manifest's UID.
func TestOwnMirror(t *testing.T) {
	a := testAgent(t)
	own := func(change func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultPodNamespace, Name: "sandbox-pool-1-node-a",
			Annotations: map[string]string{manifest.AnnotationConfigMirror: "uid-1", manifest.AnnotationConfigSource: manifest.ConfigSourceFile,
				v1alpha1.AnnotationManifestHash: "hash-1"}}}
		p.Spec.NodeName = "node-a"
		if change != nil {
			change(p)
		}
		return p
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"a mirror pod of the node's":   {own(nil), true},
		"in another namespace":         {own(func(p *corev1.Pod) { p.Namespace = "tenant" }), false},
		"of another node":              {own(func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }), false},
		"not a mirror pod":             {own(func(p *corev1.Pod) { delete(p.Annotations, manifest.AnnotationConfigMirror) }), false},
		"a pod kubelet read from api":  {own(func(p *corev1.Pod) { p.Annotations[manifest.AnnotationConfigSource] = "api" }), false},
		"without a source annotation":  {own(func(p *corev1.Pod) { delete(p.Annotations, manifest.AnnotationConfigSource) }), false},
		"a pod with an empty mirror":   {own(func(p *corev1.Pod) { p.Annotations[manifest.AnnotationConfigMirror] = "" }), false},
		"a pod with no annotations":    {own(func(p *corev1.Pod) { p.Annotations = nil }), false},
		"a mirror with another source": {own(func(p *corev1.Pod) { p.Annotations[manifest.AnnotationConfigSource] = "http" }), false},
	} {
		if got := a.ownMirror(tc.pod); got != tc.want {
			t.Errorf("%s: ownMirror = %v, want %v", name, got, tc.want)
		}
	}
	p := own(nil)
	if !mirrorOf(p, manifest.File{UID: "uid-1", Hash: "other"}) || mirrorOf(p, manifest.File{UID: "uid-2", Hash: "hash-1"}) {
		t.Error("a mirror pod mirrors the manifest of its UID, and only that one")
	}
	if !mirrorOf(p, manifest.File{Hash: "hash-1"}) || mirrorOf(p, manifest.File{Hash: "hash-2"}) {
		t.Error("a manifest without a UID (an earlier agent's) is mirrored by its hash")
	}
}

// TestPieceNumber: the number in the name kubelet gives a piece's pod on this node, piece 0
// (the single pod of agents before pieces) included; names of other nodes or forms are none.
func TestPieceNumber(t *testing.T) {
	a := testAgent(t)
	for name, want := range map[string]int{
		"sandbox-pool-7-node-a": 7, "sandbox-pool-node-a": 0, "sandbox-pool-999999-node-a": 999999,
		"sandbox-pool-07-node-a": -1, "sandbox-pool-7-node-b": -1, "sandbox-pool--1-node-a": -1, "other-7-node-a": -1,
	} {
		n, ok := a.pieceNumber(name)
		if (want < 0 && ok) || (want >= 0 && (!ok || n != want)) {
			t.Errorf("pieceNumber(%q) = %d, %v; want %d", name, n, ok, want)
		}
	}
}

// TestNextPiece: the next number is above the highest one written (kept across restarts) and
// every number in use; past MaxPiece, the lowest free one: numbers never run out, whatever
// the node's pods are named.
func TestNextPiece(t *testing.T) {
	a := testAgent(t)
	if n, err := a.nextPiece(map[int]bool{}); err != nil || n != 1 {
		t.Errorf("first number %d, %v; want 1", n, err)
	}
	if n, _ := a.nextPiece(map[int]bool{4: true, 2: true}); n != 5 {
		t.Errorf("next number %d, want 5 (above every number in use)", n)
	}
	if err := a.keep(func(s *nodeState) { s.LastPiece = 9 }); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.nextPiece(map[int]bool{4: true}); n != 10 {
		t.Errorf("next number %d, want 10 (above the highest written)", n)
	}
	// A restarted agent remembers the highest number written.
	b := newAgent(nil, a.opts, nil, nil)
	if err := b.loadState(); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.nextPiece(map[int]bool{}); n != 10 {
		t.Errorf("after a restart the next number is %d, want 10", n)
	}
	// Past the last number: the lowest number nothing uses, a file of another pool included.
	if err := os.WriteFile(filepath.Join(a.opts.ManifestDir, manifest.FileName("other-pool", 2)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := a.nextPiece(map[int]bool{manifest.MaxPiece: true, 1: true, 3: true}); err != nil || n != 4 {
		t.Errorf("past MaxPiece: %d, %v; want 4", n, err)
	}
	// A state file that cannot be written: the agent still goes by what it would have kept.
	c := testAgent(t)
	c.opts.StateFile = filepath.Join(c.opts.StateFile, "..", "..", "not-a-dir", "x")
	if err := os.WriteFile(filepath.Dir(c.opts.StateFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.keep(func(s *nodeState) { s.LastPiece = 20 }); err == nil {
		t.Fatal("keeping the state below a file did not fail")
	}
	if n, _ := c.nextPiece(map[int]bool{}); n != 21 {
		t.Errorf("after a failed write the next number is %d, want 21", n)
	}
	all := map[int]bool{}
	for i := 1; i <= manifest.MaxPiece; i++ {
		all[i] = true
	}
	if _, err := a.nextPiece(all); err == nil {
		t.Error("with every number in use, nextPiece found one")
	}
}

// TestEnforced: node-ctl is taken to enforce the most of what it last reported and of the
// config last written, across an agent's restart (the state file), and a config is confirmed
// only once node-ctl reported applying it.
func TestEnforced(t *testing.T) {
	a := testAgent(t)
	pool := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: types.UID("uid-p")}}
	ref := api.PoolRef{Name: "p", UID: "uid-p"}
	state := func(cpu string) *api.State {
		return &api.State{Pool: ref, AppliedGeneration: 1, AppliedResources: map[string]string{"cpu": cpu, "memory": "1Gi"}}
	}
	if e := a.enforced(pool); e.applied != nil || e.confirmed {
		t.Errorf("nothing known: %+v", e)
	}
	// Reported 500m; a shrink to 400m written, not answered: 500m, unconfirmed.
	a.keepReported(t.Context(), state("500m"))
	a.nc.State = state("500m")
	a.sent = &api.Config{Pool: ref, Generation: 2, Resources: map[string]string{"cpu": "400m", "memory": "1Gi"}}
	e := a.enforced(pool)
	if !lock.Equal(e.applied, rl("500m", "1Gi")) || e.confirmed {
		t.Errorf("a shrink written, not confirmed: %+v, want 500m unconfirmed", e)
	}
	// A growth written, not answered: the growth counts.
	a.sent.Resources["cpu"] = "700m"
	if e := a.enforced(pool); !lock.Equal(e.applied, rl("700m", "1Gi")) || e.confirmed {
		t.Errorf("a growth written, not confirmed: %+v, want 700m unconfirmed", e)
	}
	// Restarted: no poll answered yet; the state file and the config file say it.
	b := newAgent(nil, a.opts, nil, nil)
	if err := os.WriteFile(a.opts.NodeCtlConfig, []byte(`{"apiVersion":"`+api.APIVersion+`","pool":{"name":"p","uid":"uid-p"},"generation":2,"resources":{"cpu":"400m","memory":"1Gi"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b.restore(t.Context())
	if e := b.enforced(pool); !lock.Equal(e.applied, rl("500m", "1Gi")) || e.confirmed || !lock.Equal(e.reported, rl("500m", "1Gi")) {
		t.Errorf("restarted with node-ctl silent: %+v, want 500m reported and unconfirmed", e)
	}
	// node-ctl answers 400m: confirmed.
	b.nc.State = state("400m")
	if e := b.enforced(pool); !lock.Equal(e.applied, rl("400m", "1Gi")) || !e.confirmed {
		t.Errorf("node-ctl applied the config: %+v, want 400m confirmed", e)
	}
	// Another pool's: nothing for this one.
	other := &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: types.UID("uid-q")}}
	if e := b.enforced(other); e.applied != nil {
		t.Errorf("a recreated pool took the old one's: %+v", e)
	}
}

// TestNewestKubeletEvent: only a Warning this node's kubelet posted about the static pod's
// UID, since the manifest was written, is kubelet's word on a piece; the newest of them.
func TestNewestKubeletEvent(t *testing.T) {
	written := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f := manifest.File{UID: "uid-1", ModTime: written}
	event := func(reason string, at time.Time, change func(*corev1.Event)) corev1.Event {
		e := corev1.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: reason + " message",
			Source: corev1.EventSource{Component: kubeletComponent, Host: "node-a"}, LastTimestamp: metav1.NewTime(at)}
		e.InvolvedObject.UID = "uid-1"
		if change != nil {
			change(&e)
		}
		return e
	}
	anyReason := func(string) bool { return true }
	later := written.Add(time.Minute)
	for name, tc := range map[string]struct {
		events []corev1.Event
		want   string
	}{
		"kubelet's":               {[]corev1.Event{event("OutOfcpu", later, nil)}, "OutOfcpu: OutOfcpu message"},
		"the newest":              {[]corev1.Event{event("Old", later, nil), event("New", later.Add(time.Second), nil)}, "New: New message"},
		"another node's kubelet":  {[]corev1.Event{event("OutOfcpu", later, func(e *corev1.Event) { e.Source.Host = "node-b" })}, ""},
		"not kubelet":             {[]corev1.Event{event("OutOfcpu", later, func(e *corev1.Event) { e.Source.Component = "someone" })}, ""},
		"another pod of the name": {[]corev1.Event{event("OutOfcpu", later, func(e *corev1.Event) { e.InvolvedObject.UID = "uid-2" })}, ""},
		"before the manifest":     {[]corev1.Event{event("OutOfcpu", written.Add(-time.Minute), nil)}, ""},
		"not a warning":           {[]corev1.Event{event("OutOfcpu", later, func(e *corev1.Event) { e.Type = corev1.EventTypeNormal })}, ""},
		"events.k8s.io, this node": {[]corev1.Event{event("X", later, func(e *corev1.Event) {
			e.Source = corev1.EventSource{}
			e.ReportingController, e.ReportingInstance = kubeletComponent, "node-a"
		})}, "X: X message"},
		"events.k8s.io, other node": {[]corev1.Event{event("X", later, func(e *corev1.Event) {
			e.Source = corev1.EventSource{}
			e.ReportingController, e.ReportingInstance = kubeletComponent, "node-b"
		})}, ""},
	} {
		got, ok := newestKubeletEvent(tc.events, "node-a", f, anyReason)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q, %v; want %q", name, got, ok, tc.want)
		}
	}
	if _, ok := newestKubeletEvent([]corev1.Event{event("Failed", later, nil)}, "node-a", f, admissionRejection); ok {
		t.Error("a reason that is no admission refusal passed as one")
	}
}
