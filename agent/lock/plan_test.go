package lock

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func pc(n int, state State, res corev1.ResourceList) Piece {
	return Piece{Number: n, Res: res, Trusted: true, Current: true, State: state}
}

func unrunnable(p Piece) Piece {
	p.Unrunnable, p.Reason = true, "no runtime for \"probe\" is configured"
	return p
}

func stalePiece(p Piece) Piece {
	p.Current = false
	return p
}

func unseen(p Piece) Piece {
	p.Unseen = true
	return p
}

// roomFor is a node with the given free room and nothing else said about it.
func roomFor(free corev1.ResourceList) *Room {
	return &Room{Allocatable: rl("2", "8Gi"), Free: free, FreePods: 100}
}

func TestPlanLockSteps(t *testing.T) {
	stale := pc(1, Running, rl("500m", "1Gi"))
	stale.Current = false
	tampered := pc(2, Running, rl("100m", "1Gi"))
	tampered.Trusted = false
	for _, tc := range []struct {
		name  string
		in    Input
		check func(t *testing.T, p Step)
	}{
		{"a new pool's first piece: the whole size, no room check",
			Input{Desired: rl("500m", "1Gi"), NextPiece: 1},
			func(t *testing.T, p Step) { wantAdd(t, p, 1, rl("500m", "1Gi")) }},
		{"first node-ctl apply once the piece runs",
			Input{Desired: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))}, NextPiece: 2},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, rl("500m", "1Gi"))
				wantNoChange(t, p)
			}},
		{"node-ctl does not start on a piece kubelet admitted that does not run yet",
			Input{Desired: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Admitted, rl("500m", "1Gi"))}, NextPiece: 2},
			func(t *testing.T, p Step) { wantNodeCtl(t, p, nil) }},
		{"in sync",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1024Mi"), Pieces: []Piece{pc(1, Running, rl("0.5", "1Gi"))}, NextPiece: 2},
			func(t *testing.T, p Step) {
				if !p.Synced {
					t.Errorf("not synced: %+v", p)
				}
			}},
		{"growth asks for the node's room first",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))}, NextPiece: 2},
			func(t *testing.T, p Step) {
				if !p.NeedRoom || p.Add != nil {
					t.Errorf("plan %+v, want NeedRoom and nothing written", p)
				}
			}},
		{"growth that fits: a piece of the growth only",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))},
				Room: roomFor(rl("600m", "0")), NextPiece: 2},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 2, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})
			}},
		{"growth that does not fit: deferred with what was asked, what is free and who holds it",
			Input{Desired: rl("3", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))},
				Room: &Room{Allocatable: rl("2", "8Gi"), Free: rl("1", "4Gi"), FreePods: 100,
					Holders: map[corev1.ResourceName][]Holder{corev1.ResourceCPU: {{Pod: "default/hog", Qty: resource.MustParse("500m")},
						{Pod: "sandbox-pool-system/sandbox-pool-1-n", Qty: resource.MustParse("500m"), Own: true}}}}, NextPiece: 2},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Deferred != DeferRoom {
					t.Fatalf("deferred %q, want %q", p.Deferred, DeferRoom)
				}
				for _, s := range []string{"cpu: asked 3", "the pool holds 500m", "1 free of 2 allocatable", "more than the node has at all",
					"default/hog 500m", "sandbox-pool-system/sandbox-pool-1-n 500m (this pool)"} {
					if !strings.Contains(p.Reason, s) {
						t.Errorf("reason %q does not say %q", p.Reason, s)
					}
				}
			}},
		{"growth with --resize-preempt goes to kubelet at once",
			Input{Desired: rl("3", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))}, Preempt: true, NextPiece: 4},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 4, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m")})
			}},
		{"a lock lost below node-ctl is restored at once, the rest of a growth waits for room",
			Input{Desired: rl("2", "1Gi"), Applied: rl("1", "1Gi"), Pieces: []Piece{pc(3, Running, rl("500m", "1Gi"))},
				Room: roomFor(rl("100m", "0")), NextPiece: 4},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 4, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})
			}},
		{"kubelet refused a piece: it goes, the resize waits with kubelet's word",
			Input{Desired: rl("3", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), {Number: 2, Res: rl("2500m", "0"), Trusted: true, Current: true, State: Rejected, Reason: "OutOfcpu: Node didn't have enough resource"}}},
			func(t *testing.T, p Step) {
				if p.Add != nil || !slices.Equal(p.Remove, []int{2}) || p.Deferred != DeferKubelet || !strings.Contains(p.Reason, "OutOfcpu") {
					t.Errorf("plan %+v, want piece 2 removed and deferred with kubelet's reason", p)
				}
			}},
		{"after a refusal, no growth until the backoff ends",
			Input{Desired: rl("3", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))},
				Preempt: true, Backoff: true, LastRejection: "kubelet refused it", NextPiece: 3},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Deferred != DeferKubelet || p.Reason != "kubelet refused it" {
					t.Errorf("plan %+v, want deferred with the last rejection", p)
				}
			}},
		{"a piece kubelet has not answered for: wait",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Pending, rl("500m", "0"))}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Waiting == "" {
					t.Errorf("plan %+v, want Waiting", p)
				}
			}},
		{"growth admitted and running: node-ctl grows to the lock",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})}},
			func(t *testing.T, p Step) { wantNodeCtl(t, p, rl("1", "1Gi")) }},
		{"growth running but its mirror pod not in the API: node-ctl waits for the scheduler to count it",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), unseen(pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}))}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.NodeCtl != nil {
					t.Errorf("node-ctl grows to %v before the scheduler counts the growth", p.NodeCtl)
				}
			}},
		{"the replacement runs but its mirror pod is not in the API: nothing goes yet",
			Input{Desired: rl("1", "1Gi"), Applied: rl("1", "1Gi"), NextPiece: 4,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}), unseen(pc(3, Running, rl("1", "1Gi")))}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Waiting == "" {
					t.Errorf("plan %+v, want Waiting", p)
				}
			}},
		{"two pieces of the right sum fold into one when the node has room for a second copy",
			Input{Desired: rl("1", "1Gi"), Applied: rl("1", "1Gi"), Room: roomFor(rl("1", "1Gi")), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})}},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 3, rl("1", "1Gi"))
				if len(p.Remove) != 0 || p.RemoveFirst {
					t.Errorf("a fold removes nothing before its piece runs: %+v", p)
				}
			}},
		{"without room the pieces stay, and the pool is in sync",
			Input{Desired: rl("1", "1Gi"), Applied: rl("1", "1Gi"), Room: roomFor(rl("100m", "1Gi")), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if !p.Synced {
					t.Errorf("plan %+v, want synced", p)
				}
			}},
		{"the replacement runs: the others go",
			Input{Desired: rl("1", "1Gi"), Applied: rl("1", "1Gi"), NextPiece: 4,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}), pc(3, Running, rl("1", "1Gi"))}},
			func(t *testing.T, p Step) {
				if p.Add != nil || !slices.Equal(p.Remove, []int{1, 2}) {
					t.Errorf("plan %+v, want pieces 1 and 2 removed", p)
				}
			}},
		{"shrink: node-ctl first, the lock keeps the old size",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("1", "2Gi"), Pieces: []Piece{pc(1, Running, rl("1", "2Gi"))}, AllocatedMemory: 100 << 20, Watermark: 0.85, NextPiece: 2},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, rl("500m", "1Gi"))
				if p.Add != nil || len(p.Remove) != 0 || p.NeedRoom {
					t.Errorf("the lock moves before node-ctl shrank: %+v", p)
				}
			}},
		{"shrink after node-ctl: a new piece beside the old one when the node has room",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("1", "2Gi"))}, Room: roomFor(rl("1", "1Gi")), NextPiece: 2},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 2, rl("500m", "1Gi"))
				if len(p.Remove) != 0 {
					t.Errorf("make before break removes nothing yet: %+v", p)
				}
			}},
		{"shrink on a full node: the old piece is removed just before the new one is written",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{pc(1, Running, rl("1", "2Gi"))}, Room: roomFor(rl("0", "0")), NextPiece: 2},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 2, rl("500m", "1Gi"))
				if !p.RemoveFirst || !slices.Equal(p.Remove, []int{1}) {
					t.Errorf("plan %+v, want piece 1 removed first", p)
				}
			}},
		{"shrink back after a growth: the growth's piece goes, no replacement",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})}},
			func(t *testing.T, p Step) {
				if p.Add != nil || !slices.Equal(p.Remove, []int{2}) {
					t.Errorf("plan %+v, want piece 2 removed", p)
				}
			}},
		{"a memory shrink above the watermark: deferred, the lock keeps what node-ctl runs",
			Input{Desired: rl("1", "1Gi"), Applied: rl("1", "2Gi"), Pieces: []Piece{pc(1, Running, rl("1", "2Gi"))}, AllocatedMemory: 1900 << 20, Watermark: 0.85, NextPiece: 2},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, nil)
				wantNoChange(t, p)
				if p.Deferred != DeferUsage || !strings.Contains(p.Reason, "memory in use 1.86Gi is above 85% of the new size 1Gi") {
					t.Errorf("plan %+v, want deferred by usage", p)
				}
			}},
		{"a changed template: a current piece replaces the stale one",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), Pieces: []Piece{stale}, Room: roomFor(rl("1", "1Gi")), NextPiece: 2},
			func(t *testing.T, p Step) { wantAdd(t, p, 2, rl("500m", "1Gi")) }},
		{"a piece the agent did not write counts for nothing: the lock is restored, then it goes",
			Input{Desired: rl("500m", "2Gi"), Applied: rl("500m", "2Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), tampered}, NextPiece: 3},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 3, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")})
			}},
		{"mixed: cpu grows by a piece while memory shrinks in node-ctl",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "2Gi"), Pieces: []Piece{pc(1, Running, rl("500m", "2Gi"))},
				AllocatedMemory: 100 << 20, Watermark: 0.85, Room: roomFor(rl("1", "1Gi")), NextPiece: 2},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, rl("500m", "1Gi"))
				wantAdd(t, p, 2, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})
			}},
		{"a growth's piece kubelet cannot run: removed (the running piece holds what node-ctl runs), reported, not waited for",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3,
				Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), unrunnable(pc(2, Pending, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}))}},
			func(t *testing.T, p Step) {
				if p.Add != nil || !slices.Equal(p.Remove, []int{2}) || !strings.Contains(p.Unrunnable, "placeholder pod 2: no runtime") ||
					p.Waiting != "" || p.Synced || p.Deferred != "" {
					t.Errorf("plan %+v, want piece 2 removed and reported unrunnable", p)
				}
			}},
		{"an admitted piece kubelet cannot run, the whole lock after a replacement in place: kept, reported, not waited for",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3, Room: roomFor(rl("0", "0")),
				Pieces: []Piece{unrunnable(pc(2, Admitted, rl("500m", "1Gi")))}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Unrunnable == "" || p.Waiting != "" || p.Synced {
					t.Errorf("plan %+v, want the piece kept and reported unrunnable", p)
				}
			}},
		{"the spec reverted: a current piece replaces the stale one kubelet cannot run, make before break",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3, Room: roomFor(rl("1", "2Gi")),
				Pieces: []Piece{stalePiece(unrunnable(pc(2, Admitted, rl("500m", "1Gi"))))}},
			func(t *testing.T, p Step) {
				wantAdd(t, p, 3, rl("500m", "1Gi"))
				if p.RemoveFirst || len(p.Remove) != 0 {
					t.Errorf("plan %+v, want the new piece added beside the old one", p)
				}
			}},
		{"after an unrunnable piece the growth waits for the backoff, reported Degraded (not deferred)",
			Input{Desired: rl("1", "1Gi"), Applied: rl("500m", "1Gi"), NextPiece: 3, Backoff: true, LastRejection: "kubelet cannot run 2",
				Unrunnable: "kubelet cannot run 2", Room: roomFor(rl("1", "2Gi")), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))}},
			func(t *testing.T, p Step) {
				wantNoChange(t, p)
				if p.Unrunnable != "kubelet cannot run 2" || p.Deferred != "" || p.Synced {
					t.Errorf("plan %+v, want the growth held back and reported unrunnable", p)
				}
			}},
		{"a config node-ctl has not confirmed (it did not answer): the lock keeps the most it may run, node-ctl is asked again",
			Input{Desired: rl("400m", "1Gi"), Applied: rl("500m", "1Gi"), Reported: rl("500m", "1Gi"), Confirmed: false,
				NextPiece: 2, Room: roomFor(rl("1", "2Gi")), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi"))}},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, rl("400m", "1Gi"))
				wantNoChange(t, p)
				if p.Synced {
					t.Errorf("plan %+v is synced before node-ctl confirmed", p)
				}
			}},
		{"node-ctl reported what the pool asks but not the config last written: written again, no piece removed, not synced",
			Input{Desired: rl("500m", "1Gi"), Applied: rl("700m", "1Gi"), Reported: rl("500m", "1Gi"), Confirmed: false,
				NextPiece: 3, Room: roomFor(rl("1", "2Gi")), Pieces: []Piece{pc(1, Running, rl("500m", "1Gi")), pc(2, Running, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")})}},
			func(t *testing.T, p Step) {
				wantNodeCtl(t, p, rl("500m", "1Gi"))
				if p.Synced || len(p.Remove) != 0 {
					t.Errorf("plan %+v is synced before node-ctl confirmed", p)
				}
			}},
	} {
		if tc.in.Applied != nil && tc.in.Reported == nil {
			// node-ctl reported what it applies, and it is the config last written.
			tc.in.Reported, tc.in.Confirmed = tc.in.Applied, true
		}
		t.Run(tc.name, func(t *testing.T) { tc.check(t, Plan(tc.in)) })
	}
}

func wantAdd(t *testing.T, p Step, n int, res corev1.ResourceList) {
	t.Helper()
	if p.Add == nil || p.Add.Number != n || !Equal(p.Add.Res, res) {
		t.Errorf("plan adds %+v, want piece %d with %v (plan %+v)", p.Add, n, res, p)
	}
}

func wantNodeCtl(t *testing.T, p Step, want corev1.ResourceList) {
	t.Helper()
	if !Equal(p.NodeCtl, want) {
		t.Errorf("node-ctl %v, want %v", p.NodeCtl, want)
	}
}

func wantNoChange(t *testing.T, p Step) {
	t.Helper()
	if p.Add != nil || len(p.Remove) != 0 {
		t.Errorf("plan changes pieces: %+v", p)
	}
}

// lockSim plays kubelet and the scheduler for lock.Plan, the way the agent's passes meet
// them: kubelet admits a new piece only if it fits its own count of the node (or rejects
// it), a removed piece leaves kubelet's count at once but its mirror pod stays in the
// scheduler's count until kubelet has stopped it, and a swap (RemoveFirst) reaches kubelet
// as the removals, then the new piece. At every step it checks what the agent promises:
// kubelet's and the scheduler's counts of the lock never fall below what node-ctl runs, nor
// below the smaller of the old and the new size.
type lockSim struct {
	t           *testing.T
	allocatable corev1.ResourceList
	others      corev1.ResourceList // what other pods request
	pieces      map[int]*simPiece
	// stopping are removed pieces whose mirror pods the scheduler still counts.
	stopping []stoppingPiece
	// linger is how many kubelet steps a removed piece's mirror pod outlives it by.
	linger int
	// swaps counts the plans that removed pieces before adding their replacement.
	swaps   int
	applied corev1.ResourceList
	next    int
	usage   int64
	log     []string
}

type stoppingPiece struct {
	res corev1.ResourceList
	// steps is how many more kubelet steps its mirror pod stays.
	steps int
}

type simPiece struct {
	res   corev1.ResourceList
	state State
	stale bool
}

func newLockSim(t *testing.T, allocatable, others, size corev1.ResourceList) *lockSim {
	s := &lockSim{t: t, allocatable: allocatable, others: others, pieces: map[int]*simPiece{}, next: 1}
	s.resize(size, size, 20)
	return s
}

// kubeletLock is what kubelet counts for the pool: its admitted pieces.
func (s *lockSim) kubeletLock() corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range s.pieces {
		if p.state == Admitted || p.state == Running {
			AddTo(out, p.res)
		}
	}
	return out
}

// schedulerLock is what the scheduler counts: the mirror pods, the stopping ones included.
func (s *lockSim) schedulerLock() corev1.ResourceList {
	out := s.kubeletLock()
	for _, sp := range s.stopping {
		AddTo(out, sp.res)
	}
	return out
}

func (s *lockSim) Room() *Room {
	used := s.schedulerLock()
	AddTo(used, s.others)
	free := PositivePart(Subtract(s.allocatable, used))
	for n := range s.allocatable {
		if _, ok := free[n]; !ok {
			free[n] = resource.Quantity{}
		}
	}
	r := &Room{Allocatable: s.allocatable, Free: free, FreePods: 100, Leaving: corev1.ResourceList{}}
	for _, sp := range s.stopping {
		AddTo(r.Leaving, sp.res)
		r.LeavingPods++
	}
	return r
}

// check fails the test if a count is below floor or below what node-ctl runs.
func (s *lockSim) check(what string, floor corev1.ResourceList) {
	s.t.Helper()
	for name, lock := range map[string]corev1.ResourceList{"kubelet": s.kubeletLock(), "scheduler": s.schedulerLock()} {
		if !Covers(lock, floor) || !Covers(lock, s.applied) {
			s.t.Fatalf("%s: %s counts %v, below min(old, new) %v or node-ctl's %v\n%s", what, name, lock, floor, s.applied, strings.Join(s.log, "\n"))
		}
	}
}

// resize drives the lock from its state to desired, pass by pass, within maxPasses.
func (s *lockSim) resize(old, desired corev1.ResourceList, maxPasses int) Step {
	s.t.Helper()
	floor := corev1.ResourceList{}
	for _, n := range Names(old, desired) {
		o, d := old[n], desired[n]
		floor[n] = MinQuantity(o, d)
	}
	if len(s.pieces) == 0 {
		floor = nil // a new pool's first lock
	}
	var p Step
	for pass := range maxPasses {
		in := Input{Desired: desired, Applied: s.applied, Reported: s.applied, Confirmed: s.applied != nil,
			AllocatedMemory: s.usage, Watermark: 0.85, NextPiece: s.next}
		for _, n := range slices.Sorted(maps.Keys(s.pieces)) {
			sp := s.pieces[n]
			in.Pieces = append(in.Pieces, Piece{Number: n, Res: sp.res, Trusted: true, Current: !sp.stale, State: sp.state})
		}
		p = Plan(in)
		if p.NeedRoom {
			in.Room = s.Room()
			p = Plan(in)
		}
		s.log = append(s.log, fmt.Sprintf("pass %d: pieces %v applied %v → add %+v remove %v first=%v node-ctl %v deferred %q",
			pass, s.describe(), s.applied, p.Add, p.Remove, p.RemoveFirst, p.NodeCtl, p.Deferred))
		if p.Synced {
			return p
		}
		if p.NodeCtl != nil {
			if !Covers(s.runningLock(), p.NodeCtl) {
				s.t.Fatalf("node-ctl asked for %v while the running pieces hold %v\n%s", p.NodeCtl, s.runningLock(), strings.Join(s.log, "\n"))
			}
			s.applied = p.NodeCtl
			s.check("after node-ctl", floor)
			if p.Add == nil && len(p.Remove) == 0 {
				in.Applied = s.applied
				p = Plan(in)
				if p.NeedRoom {
					in.Room = s.Room()
					p = Plan(in)
				}
			}
		}
		if p.RemoveFirst {
			s.swaps++
			// kubelet takes the removals and the new piece one after the other; nothing
			// else is admitted between them (the file source's two updates are consecutive
			// in kubelet's sync loop, which admits pods one at a time).
			s.remove(p.Remove)
			s.add(p.Add)
			s.admit()
		} else {
			s.add(p.Add)
			s.check("after a new piece", floor)
			s.remove(p.Remove)
		}
		s.check("after the pieces changed", floor)
		s.kubelet()
		s.check("after kubelet", floor)
		if p.Deferred != "" && p.Add == nil && len(p.Remove) == 0 && p.NodeCtl == nil {
			return p
		}
	}
	s.t.Fatalf("no convergence to %v in %d passes\n%s", desired, maxPasses, strings.Join(s.log, "\n"))
	return p
}

func (s *lockSim) runningLock() corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range s.pieces {
		if p.state == Running {
			AddTo(out, p.res)
		}
	}
	return out
}

func (s *lockSim) add(np *NewPiece) {
	if np == nil {
		return
	}
	if np.Number < s.next {
		s.t.Fatalf("piece %d reuses a number (next is %d)", np.Number, s.next)
	}
	s.pieces[np.Number] = &simPiece{res: np.Res, state: Pending}
	s.next = np.Number + 1
}

func (s *lockSim) remove(numbers []int) {
	for _, n := range numbers {
		if p, ok := s.pieces[n]; ok {
			if p.state == Admitted || p.state == Running {
				s.stopping = append(s.stopping, stoppingPiece{res: p.res, steps: s.linger})
			}
			delete(s.pieces, n)
		}
	}
}

// kubelet starts admitted pieces, admits or rejects pending ones, and finishes stopping
// the removed ones.
func (s *lockSim) kubelet() {
	for _, p := range s.pieces {
		if p.state == Admitted {
			p.state = Running
		}
	}
	s.admit()
	var left []stoppingPiece
	for _, sp := range s.stopping {
		if sp.steps > 0 {
			sp.steps--
			left = append(left, sp)
		}
	}
	s.stopping = left
}

// admit admits or rejects the pending pieces against kubelet's own count of the node.
func (s *lockSim) admit() {
	for _, n := range slices.Sorted(maps.Keys(s.pieces)) {
		p := s.pieces[n]
		if p.state != Pending {
			continue
		}
		used := s.kubeletLock()
		AddTo(used, s.others)
		AddTo(used, p.res)
		if Covers(s.allocatable, used) {
			p.state = Admitted
		} else {
			p.state = Rejected
		}
	}
}

func (s *lockSim) describe() string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(s.pieces)) {
		p := s.pieces[n]
		parts = append(parts, fmt.Sprintf("%d:%s:%s", n, p.state, Text(p.res)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// converged fails the test unless node-ctl and the lock hold exactly want.
func (s *lockSim) converged(want corev1.ResourceList) {
	s.t.Helper()
	if !Equal(s.applied, want) || !Equal(s.kubeletLock(), want) {
		s.t.Fatalf("converged to node-ctl %v, lock %v; want %v\n%s", s.applied, s.kubeletLock(), want, strings.Join(s.log, "\n"))
	}
}

// TestLockWalk drives whole resizes through lock.Plan against the simulated kubelet and
// scheduler and checks the invariant at every step: on a node with room, on a full node,
// a growth that does not fit until room is made, a changed template, a mixed resize, and a
// memory shrink held back by usage.
func TestLockWalk(t *testing.T) {
	t.Run("room", func(t *testing.T) {
		s := newLockSim(t, rl("4", "16Gi"), rl("0", "0"), rl("1", "2Gi"))
		s.converged(rl("1", "2Gi"))
		for _, step := range []corev1.ResourceList{rl("2", "4Gi"), rl("500m", "1Gi"), rl("1500m", "512Mi"), rl("1500m", "512Mi")} {
			old := s.kubeletLock()
			s.resize(old, step, 20)
			s.converged(step)
			if len(s.pieces) != 1 {
				t.Errorf("with room the pieces fold into one, got %s", s.describe())
			}
		}
	})
	t.Run("full node", func(t *testing.T) {
		// Other pods take everything but the pool's 1 cpu / 2Gi.
		s := newLockSim(t, rl("4", "16Gi"), rl("3", "14Gi"), rl("1", "2Gi"))
		s.resize(rl("1", "2Gi"), rl("500m", "1Gi"), 20)
		s.converged(rl("500m", "1Gi"))
		s.others = rl("3", "14Gi")
		s.resize(rl("500m", "1Gi"), rl("1", "2Gi"), 20)
		s.converged(rl("1", "2Gi"))
		if len(s.pieces) != 2 {
			t.Errorf("a growth on a full node keeps its piece beside the old one, got %s", s.describe())
		}
		s.resize(rl("1", "2Gi"), rl("500m", "2Gi"), 20)
		s.converged(rl("500m", "2Gi"))
	})
	t.Run("scale-down right after a fold that took the room", func(t *testing.T) {
		// The fold's replaced pieces are still mirror pods when the scale-down comes: the
		// room for a replacement beside the folded piece is theirs, so the agent waits for
		// them to go instead of swapping the lock.
		s := newLockSim(t, rl("2", "8Gi"), rl("600m", "1Gi"), rl("500m", "128Mi"))
		s.linger = 2
		s.resize(rl("500m", "128Mi"), rl("700m", "192Mi"), 20)
		s.converged(rl("700m", "192Mi"))
		if len(s.pieces) != 1 || len(s.stopping) == 0 {
			t.Fatalf("want the pieces folded and their mirror pods still there, got %s, %d stopping", s.describe(), len(s.stopping))
		}
		s.resize(rl("700m", "192Mi"), rl("500m", "128Mi"), 20)
		s.converged(rl("500m", "128Mi"))
		if s.swaps != 0 {
			t.Errorf("the lock was swapped %d times; want a replacement beside it once the removed pieces are gone\n%s", s.swaps, strings.Join(s.log, "\n"))
		}
	})
	t.Run("growth waits for room", func(t *testing.T) {
		s := newLockSim(t, rl("2", "8Gi"), rl("1", "1Gi"), rl("500m", "1Gi"))
		p := s.resize(rl("500m", "1Gi"), rl("1500m", "1Gi"), 20)
		if p.Deferred != DeferRoom || !Equal(s.kubeletLock(), rl("500m", "1Gi")) || !Equal(s.applied, rl("500m", "1Gi")) {
			t.Fatalf("deferred %q, lock %v, node-ctl %v; want deferred for room with the old lock kept", p.Deferred, s.kubeletLock(), s.applied)
		}
		s.others = rl("0", "1Gi") // the pod that held the cpu goes
		s.resize(rl("500m", "1Gi"), rl("1500m", "1Gi"), 20)
		s.converged(rl("1500m", "1Gi"))
	})
	t.Run("changed template", func(t *testing.T) {
		for _, others := range []corev1.ResourceList{rl("0", "0"), rl("3", "14Gi")} {
			s := newLockSim(t, rl("4", "16Gi"), others, rl("1", "2Gi"))
			for _, p := range s.pieces {
				p.stale = true
			}
			s.resize(rl("1", "2Gi"), rl("1", "2Gi"), 20)
			s.converged(rl("1", "2Gi"))
			for n, p := range s.pieces {
				if p.stale {
					t.Errorf("piece %d is still of the old template", n)
				}
			}
		}
	})
	t.Run("memory shrink held back by usage", func(t *testing.T) {
		s := newLockSim(t, rl("4", "16Gi"), rl("0", "0"), rl("1", "4Gi"))
		s.usage = 3 << 30
		p := s.resize(rl("1", "4Gi"), rl("1", "2Gi"), 20)
		if p.Deferred != DeferUsage || !Equal(s.kubeletLock(), rl("1", "4Gi")) {
			t.Fatalf("deferred %q, lock %v; want the shrink deferred by usage with the old lock", p.Deferred, s.kubeletLock())
		}
		s.usage = 1 << 30
		s.resize(rl("1", "4Gi"), rl("1", "2Gi"), 20)
		s.converged(rl("1", "2Gi"))
	})
}

func TestRoomOf(t *testing.T) {
	node := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")}}}
	pod := func(name, pool string, phase corev1.PodPhase, res corev1.ResourceList) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		p.Namespace, p.Name = "ns", name
		if pool != "" {
			p.Labels = map[string]string{v1alpha1.LabelPoolName: pool}
		}
		p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: res}}}
		return p
	}
	r := RoomOf(node, []corev1.Pod{
		pod("piece-2", "pool", corev1.PodRunning, rl("700m", "192Mi")),
		pod("piece-1", "pool", corev1.PodRunning, rl("500m", "128Mi")), // removed from the lock: leaving
		pod("other-pool-1", "other", corev1.PodRunning, rl("100m", "64Mi")),
		pod("app", "", corev1.PodRunning, rl("200m", "1Gi")),
		pod("done", "", corev1.PodFailed, rl("1", "1Gi")), // finished: holds nothing
	}, func(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelPoolName] == "pool" }, map[string]bool{"piece-2": true})
	if cpu, mem := r.Free[corev1.ResourceCPU], r.Free[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("500m")) != 0 || mem.Cmp(resource.MustParse("6784Mi")) != 0 || r.FreePods != 6 {
		t.Errorf("free %v, %d pods; want 500m, 6784Mi and 6 pods", r.Free, r.FreePods)
	}
	if !Equal(r.Leaving, rl("500m", "128Mi")) || r.LeavingPods != 1 {
		t.Errorf("leaving %v in %d pods; want the removed piece's 500m, 128Mi", r.Leaving, r.LeavingPods)
	}
	if r.Fits(rl("700m", "192Mi")) || !r.FitsOnceGone(rl("700m", "192Mi")) || r.FitsOnceGone(rl("1100m", "0")) {
		t.Errorf("a 700m piece must fit only once the removed piece is gone, an 1100m one not even then (room %+v)", r)
	}
}

func rl(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}
