package lock

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// The lock of a pool is a set of static pods, its pieces (docs/agent.md, "The lock"). Each
// piece is a manifest file of its own with a number of its own; the lock is the sum of the
// requests of the pieces kubelet has admitted. A growth adds a piece sized to the growth, so
// kubelet's admission decides whether the node holds it, and refuses it without touching the
// pieces that run. A replacement (a smaller size, a changed template, a fold of several
// pieces into one) adds the new piece before it removes the old ones when the node has room
// for both, and otherwise removes the old ones just before it adds the new one.

// pieceState is what kubelet has made of a piece.
type State int

const (
	// piecePending: the file is written; kubelet has neither admitted nor rejected it yet
	// (no mirror pod of this content, no rejection event).
	Pending State = iota
	// pieceAdmitted: kubelet admitted it: its mirror pod exists, the sandbox is not running
	// yet. kubelet and the scheduler both count it.
	Admitted
	// pieceRunning: its mirror pod is Running.
	Running
	// pieceRejected: kubelet refused it (an admission rejection event, or a Failed mirror
	// pod). It holds nothing.
	Rejected
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Admitted:
		return "admitted"
	case Running:
		return "running"
	case Rejected:
		return "rejected"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// piece is one placeholder pod of the pool as the agent observes it.
type Piece struct {
	// Number is the piece's number: its file and pod name.
	Number int
	// Res is the requests in its file: what kubelet admits for it.
	Res corev1.ResourceList
	// Trusted: the file is one the agent wrote for this pool (its hash matches its content
	// and it carries the pool's UID). An untrusted piece counts for nothing in the lock.
	Trusted bool
	// Current: the file is exactly what the agent would render now for this number and
	// these resources (the pool's template); a piece that is not current is replaced.
	Current bool
	State   State
	// Unseen: kubelet runs the piece (its shim started it and lives) but its mirror pod is
	// not in the API (the API server was unreachable, or kubelet is recreating it), so the
	// scheduler does not count it yet. It holds its part in kubelet; node-ctl does not grow
	// into it and no other piece goes because of it until the scheduler counts it too.
	Unseen bool
	// Unrunnable: kubelet has not run the piece (it is pending or admitted) within
	// Options.PieceStartTimeout of its manifest (a RuntimeClass or handler the node does not
	// have, an image it cannot get, ...). It is removed when the lock holds what node-ctl
	// runs without it, and never waited for.
	Unrunnable bool
	// Reason is kubelet's word for a rejected piece (its reason and message), or why an
	// unrunnable piece is.
	Reason string
}

// holds reports whether the piece counts in the lock: kubelet admitted a file the agent
// wrote for this pool.
func (p Piece) Holds() bool {
	return p.Trusted && (p.State == Admitted || p.State == Running)
}

// lockInput is what the lock decision reads.
type Input struct {
	// Desired is the effective policy: the override when enabled, else the class snapshot.
	Desired corev1.ResourceList
	// Pieces are the pool's pieces on disk, with what kubelet made of them.
	Pieces []Piece
	// Applied is the most node-ctl may be running for the pool (what it last reported, or
	// the config last written for it if more); nil when it runs nothing for it.
	Applied corev1.ResourceList
	// Reported is what node-ctl last reported running for the pool; nil when nothing.
	Reported corev1.ResourceList
	// AllocatedMemory is the memory the pool's sandboxes use (node-ctl's working set).
	AllocatedMemory int64
	// Watermark is the share of a smaller memory size usage may reach for a downscale.
	Watermark float64
	// Room is the node's free room as the scheduler counts it; nil while not read (the plan
	// then asks for it with NeedRoom).
	Room *Room
	// Preempt lets a growth go to kubelet without the room check: kubelet then preempts pods
	// that are not critical to make room (static pods are critical to it).
	Preempt bool
	// Backoff: kubelet refused a piece of this pool, or could not run one, a short while ago;
	// no growth is asked of it again until the backoff ends (nor, after an unrunnable piece,
	// a replacement). LastRejection is kubelet's word then.
	Backoff       bool
	LastRejection string
	// Unrunnable says why a piece of the pool's current spec could not be run, since the
	// last time the pool was synced ("" when none could not): the pool is reported Degraded
	// until a piece of it runs or the spec changes.
	Unrunnable string
	// Confirmed: node-ctl has reported applying the config the agent last wrote for the
	// pool; until it has, the pool is not synced and no resize is completed.
	Confirmed bool
	// NextPiece is the number of the next piece the plan adds.
	NextPiece int
}

// newPiece is a piece the plan writes.
type NewPiece struct {
	Number int
	Res    corev1.ResourceList
}

// deferral says why a resize waits: the reason of ResizeDeferred=True.
type Deferral = v1alpha1.ConditionReason

const (
	// deferRoom: the node has not the room for a growth, as the scheduler counts it.
	DeferRoom = v1alpha1.ReasonInsufficientRoom
	// deferKubelet: kubelet refused the growth's piece.
	DeferKubelet = v1alpha1.ReasonRejectedByKubelet
	// deferUsage: a memory downscale waits while the sandboxes use too much of the new size.
	DeferUsage = v1alpha1.ReasonUsageAboveWatermark
)

// lockPlan is one step. At most one kind of change to the pieces per pass: the next pass
// reads what kubelet made of it.
type Step struct {
	// Add is a piece to write; Remove are pieces to delete. RemoveFirst orders the two:
	// false, the new piece first (or only one of them); true, the old pieces are removed
	// just before the new one is written (a replacement on a node without room for both).
	Add         *NewPiece
	Remove      []int
	RemoveFirst bool
	// NodeCtl is what node-ctl must apply now; nil: leave node-ctl alone.
	NodeCtl corev1.ResourceList
	// NeedRoom: the decision needs the node's free room; plan again with Room set.
	NeedRoom bool
	// Lock is what the admitted pieces hold now.
	Lock corev1.ResourceList
	// Synced: node-ctl and the lock both hold exactly Desired, every piece current.
	Synced bool
	// Deferred says why a resize waits ("" when it does not); Reason says it for a person.
	Deferred Deferral
	Reason   string
	// Waiting says what the plan waits for when a piece is not admitted yet.
	Waiting string
	// Unrunnable says why a piece of the pool cannot be run (kubelet has not run it within
	// Options.PieceStartTimeout); "" when none. The pool is Degraded, not resizing.
	Unrunnable string
}

// planLock decides the next step. It is a pure function of its input: the agent calls it on
// every pass, so a crash or restart at any point resumes from what it observes. What it keeps:
//   - node-ctl never runs more than the lock holds: it grows only up to the admitted pieces,
//     and shrinks before the lock does;
//   - the lock never holds less than what node-ctl runs, nor less than the smaller of the
//     old and the new size during a resize: a growth adds a piece; pieces are removed only
//     while the others hold enough, or in the same step as their replacement is written;
//   - a growth beyond what node-ctl runs waits, unless Preempt, until the scheduler's view
//     of the node has room for it, so kubelet never preempts another pod for it; restoring
//     a lock below what node-ctl runs, or the first lock of a pool, does not wait.
func Plan(in Input) Step {
	t := tallyPieces(in.Pieces)
	p := Step{Lock: t.lock, Remove: t.rejectedNumbers()}
	// What the lock must hold: the desired size, and never less than what node-ctl runs.
	want := MaxOf(in.Desired, in.Applied)
	// node-ctl grows only up to the pieces that run and that the scheduler counts: kubelet
	// and the scheduler count an admitted piece already, the pool's readiness only once it
	// runs, and the scheduler only once its mirror pod is in the API.
	p.NodeCtl, p.Deferred, p.Reason = planNodeCtl(in, t.running)

	switch {
	case p.dropRejected(t):
	case p.dropUnrunnable(in, t):
	case t.pending > 0:
		p.Waiting = "waiting for kubelet to admit the placeholder pod just written"
	case p.grow(in, want, t.lock):
	case p.waitForPieces(in):
	default:
		p.replace(in, want, t)
	}
	return p
}

// pieceTally is what the pieces add up to.
type pieceTally struct {
	// lock is what the admitted pieces hold; running what those that run and that the
	// scheduler counts hold.
	lock, running corev1.ResourceList
	// rejected and unrunnable are the pieces kubelet refused and those it does not run.
	rejected, unrunnable []Piece
	// pending counts the pieces kubelet has neither admitted nor refused.
	pending int
	// live are the pieces but the rejected ones.
	live []Piece
}

func tallyPieces(pieces []Piece) pieceTally {
	t := pieceTally{lock: corev1.ResourceList{}, running: corev1.ResourceList{}}
	for _, pc := range pieces {
		switch {
		case pc.State == Rejected:
			t.rejected = append(t.rejected, pc)
		case pc.Unrunnable:
			t.unrunnable = append(t.unrunnable, pc)
		case pc.State == Pending:
			t.pending++
		}
		if pc.State != Rejected {
			t.live = append(t.live, pc)
		}
		if pc.Holds() {
			AddTo(t.lock, pc.Res)
			if pc.State == Running && !pc.Unseen {
				AddTo(t.running, pc.Res)
			}
		}
	}
	return t
}

func (t pieceTally) rejectedNumbers() []int {
	var out []int
	for _, pc := range t.rejected {
		out = append(out, pc.Number)
	}
	return out
}

// dropRejected: a rejected piece holds nothing. It is removed (the plan's Remove already
// names it), kubelet's word is reported, and the growth is asked again after the backoff.
func (p *Step) dropRejected(t pieceTally) bool {
	if len(t.rejected) == 0 {
		return false
	}
	p.Deferred, p.Reason = DeferKubelet, "kubelet refused placeholder pod "+strconv.Itoa(t.rejected[0].Number)+": "+t.rejected[0].Reason
	return true
}

// dropUnrunnable: a piece kubelet cannot run is never waited for. It goes, and the attempt
// is made again after the backoff, when the lock holds what node-ctl runs without it:
// kubelet and the scheduler may count an admitted one, but node-ctl never grew into it. One
// the lock cannot do without (the whole lock, after a replacement in place) stays until a
// piece that runs replaces it.
func (p *Step) dropUnrunnable(in Input, t pieceTally) bool {
	p.Unrunnable = in.Unrunnable
	if len(t.unrunnable) == 0 {
		return false
	}
	p.Unrunnable = "kubelet cannot run placeholder pod " + strconv.Itoa(t.unrunnable[0].Number) + ": " + t.unrunnable[0].Reason
	left := t.lock.DeepCopy()
	for _, pc := range t.unrunnable {
		rest := left
		if pc.Holds() {
			rest = Subtract(left, pc.Res)
		}
		if Covers(rest, in.Applied) {
			p.Remove, left = append(p.Remove, pc.Number), rest
		}
	}
	return len(p.Remove) > 0
}

// grow adds a piece for what the lock lacks of want, after the room check when the growth
// goes beyond restoring what node-ctl runs. It reports whether the lock lacks anything.
func (p *Step) grow(in Input, want, lock corev1.ResourceList) bool {
	grow := PositivePart(Subtract(want, lock))
	if len(grow) == 0 {
		return false
	}
	restore := PositivePart(Subtract(in.Applied, lock))
	checked := !in.Preempt && len(lock) > 0 && len(PositivePart(Subtract(grow, restore))) > 0
	if checked {
		if in.Room == nil {
			p.NeedRoom = true
			return true
		}
		if !in.Room.Fits(grow) {
			if len(restore) > 0 {
				p.Add = &NewPiece{Number: in.NextPiece, Res: restore}
				return true
			}
			p.Deferred, p.Reason = DeferRoom, in.Room.Shortfall(grow, want, lock)
			return true
		}
	}
	if in.Backoff {
		if in.Unrunnable == "" {
			p.Deferred, p.Reason = DeferKubelet, in.LastRejection
		}
		return true
	}
	p.Add = &NewPiece{Number: in.NextPiece, Res: grow}
	return true
}

// waitForPieces: the lock holds enough, and what it holds too much of, what is not current
// and extra pieces go only once every piece runs and the scheduler counts it (a piece goes
// only after its replacement runs, so the pool stays ready).
func (p *Step) waitForPieces(in Input) bool {
	for _, pc := range in.Pieces {
		if pc.State == Admitted && !pc.Unrunnable {
			p.Waiting = "waiting for placeholder pod " + strconv.Itoa(pc.Number) + " to run"
			return true
		}
		if pc.Unseen {
			p.Waiting = "waiting for the mirror pod of placeholder pod " + strconv.Itoa(pc.Number) + ": the scheduler does not count it yet"
			return true
		}
	}
	return false
}

// replace brings a lock that holds enough to one current piece of want: it keeps a single
// current piece, removes what the others can do without, or adds the one piece that
// replaces them all (before they go when the node has room, in the same instant otherwise).
func (p *Step) replace(in Input, want corev1.ResourceList, t pieceTally) {
	stale := slices.ContainsFunc(t.live, func(pc Piece) bool { return !pc.Current || !pc.Trusted })
	surplus := !Equal(t.lock, want)
	if !stale && !surplus && len(t.live) <= 1 {
		p.Synced = p.synced(in, t.lock) && len(t.unrunnable) == 0
		return
	}
	if p.keepExact(want, t.live) || p.removeSpare(want, t) {
		return
	}
	// One piece of the size the lock must hold replaces them all.
	if in.Room == nil {
		p.NeedRoom = true
		return
	}
	if in.Backoff && in.Unrunnable != "" {
		return // the last piece of this spec could not be run: the next one waits for the backoff
	}
	if !surplus && !stale {
		if in.Room.Fits(want) {
			p.Add = &NewPiece{Number: in.NextPiece, Res: want}
		}
		// A fold waits for room: several current pieces of the right sum hold the lock.
		p.Synced = p.Add == nil && p.synced(in, t.lock) && len(t.unrunnable) == 0
		return
	}
	if !in.Room.Fits(want) && in.Room.FitsOnceGone(want) {
		// Pieces removed a moment ago still count until kubelet has deleted their mirror
		// pods; without them the node has room to replace the lock without a gap.
		p.Waiting = "waiting for removed placeholder pods to leave the node: then the lock is replaced without a gap"
		return
	}
	p.Add = &NewPiece{Number: in.NextPiece, Res: want}
	if !in.Room.Fits(want) {
		for _, pc := range t.live {
			p.Remove = append(p.Remove, pc.Number)
		}
		p.RemoveFirst = true
	}
}

// keepExact: a running, current piece that holds exactly what the lock must stays, and the
// others go.
func (p *Step) keepExact(want corev1.ResourceList, live []Piece) bool {
	for _, pc := range live {
		if pc.State == Running && pc.Current && pc.Trusted && Equal(pc.Res, want) {
			for _, o := range live {
				if o.Number != pc.Number {
					p.Remove = append(p.Remove, o.Number)
				}
			}
			return true
		}
	}
	return false
}

// removeSpare removes the pieces the others can do without, those that are not current
// first, and pieces that hold nothing and are not current.
func (p *Step) removeSpare(want corev1.ResourceList, t pieceTally) bool {
	order := slices.Clone(t.live)
	slices.SortStableFunc(order, func(a, b Piece) int {
		return boolInt(a.Current && a.Trusted) - boolInt(b.Current && b.Trusted)
	})
	left := t.lock.DeepCopy()
	for _, pc := range order {
		if !pc.Holds() {
			if !pc.Trusted || !pc.Current {
				p.Remove = append(p.Remove, pc.Number)
			}
			continue
		}
		rest := Subtract(left, pc.Res)
		if Covers(rest, want) {
			p.Remove = append(p.Remove, pc.Number)
			left = rest
		}
	}
	return len(p.Remove) > 0
}

// synced reports whether, with the pieces as they are, node-ctl and the lock hold exactly
// the pool's resources and node-ctl has confirmed it.
func (p *Step) synced(in Input, lock corev1.ResourceList) bool {
	return p.NodeCtl == nil && in.Confirmed && Equal(in.Applied, in.Desired) && Equal(lock, in.Desired) && p.Deferred == ""
}

// planNodeCtl is node-ctl's part of the step: grow up to what the running pieces hold,
// shrink first (a memory shrink only while usage allows it).
func planNodeCtl(in Input, lock corev1.ResourceList) (corev1.ResourceList, Deferral, string) {
	target := corev1.ResourceList{}
	var deferred Deferral
	var reason string
	for _, name := range Names(in.Desired, in.Applied) {
		d, desired := in.Desired[name]
		a, applied := in.Applied[name]
		l := lock[name]
		switch {
		case !desired:
			// No longer part of the pool: node-ctl drops it.
		case !applied || d.Cmp(a) > 0:
			// Grow (or first apply): only up to what the lock holds, never below what runs.
			t := MinQuantity(d, l)
			if applied && t.Cmp(a) < 0 {
				t = a
			}
			if !t.IsZero() {
				target[name] = t.DeepCopy()
			}
		case d.Cmp(a) < 0 && name == corev1.ResourceMemory:
			limit := int64(float64(d.Value()) * in.Watermark)
			if in.AllocatedMemory > limit {
				target[name] = a.DeepCopy()
				deferred = DeferUsage
				reason = fmt.Sprintf("memory in use %s is above %.0f%% of the new size %s (%s)",
					ReadableBytes(in.AllocatedMemory), in.Watermark*100, d.String(), ReadableBytes(limit))
				continue
			}
			target[name] = d.DeepCopy()
		default:
			target[name] = d.DeepCopy()
		}
	}
	if in.Applied == nil && (target.Cpu().IsZero() || target.Memory().IsZero()) {
		// node-ctl starts with the pool's cpu and memory locked, not before.
		return nil, deferred, reason
	}
	if Equal(target, in.Reported) && in.Confirmed {
		return nil, deferred, reason
	}
	// Also when node-ctl has not confirmed the config last written: it is written again.
	return target, deferred, reason
}
