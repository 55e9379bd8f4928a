package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/agent/lock"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// pendingRecheck is how often a pass looks again while kubelet has neither admitted nor
// rejected a piece (a rejection is an event, which triggers no pass).
const pendingRecheck = time.Second

// reconcile is one level-triggered pass over one pool: everything is derived from what is
// observed now (pool, manifests on disk, mirror pods, node-ctl's state), so a crash or a
// restart at any point resumes correctly.
func (a *Agent) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	return a.sync(ctx, req.Name)
}

// pass is what one pass observed and decided, for the status.
type pass struct {
	obs     observed
	plan    lock.Step
	desired corev1.ResourceList
	applied corev1.ResourceList
	nc      nodeCtlView
	// nodeCtlErr is a failed node-ctl apply of this pass.
	nodeCtlErr error
}

func (a *Agent) sync(ctx context.Context, name string) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("pool", name)
	ctx = logf.IntoContext(ctx, log)
	pool, err := a.pool(ctx, name)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, a.poolGone(ctx, name, "")
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if pool.DeletionTimestamp != nil {
		return ctrl.Result{}, a.poolGone(ctx, name, pool.UID)
	}
	if !a.holdsLease(name) {
		// A new pool's Lease is taken at once, not on the next renewal tick: until it
		// exists the controller reports the agent missing (LeaseNotFound).
		a.renewLease(ctx, name)
	}
	pool, err = a.defaulted(pool)
	if err != nil {
		log.Error(err, "pool fails the schema; keeping the current manifests")
		a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, EventReasonInvalidPool, ActionValidate, "Pool fails the schema, manifests left as they are: %v", err)
		return ctrl.Result{}, nil
	}

	ps, err := a.step(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	a.noteResize(pool, ps)

	// Status, only when a field changed. The steps above never wait on it.
	if err := a.report(ctx, pool, ps); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case ps.plan.Waiting != "" || ps.plan.NeedRoom:
		return ctrl.Result{RequeueAfter: min(pendingRecheck, a.opts.NodeCtlPollInterval)}, nil
	case !ps.plan.Synced:
		return ctrl.Result{RequeueAfter: a.opts.NodeCtlPollInterval}, nil
	}
	return ctrl.Result{}, nil
}

// step observes the pool's lock and node-ctl, decides, and acts: node-ctl first (it only
// shrinks ahead of the lock and only grows up to it), then the pieces.
func (a *Agent) step(ctx context.Context, pool *v1alpha1.SandboxPool) (pass, error) {
	log := logf.FromContext(ctx)
	ps := pass{desired: effectiveResources(pool), nc: a.nodeCtlView()}
	obs, err := a.observe(ctx, pool)
	if err != nil {
		return ps, err
	}
	ps.obs = obs
	en := a.enforced(pool)
	ps.applied = en.applied
	in := lock.Input{Desired: ps.desired, Pieces: obs.pieces, Applied: en.applied, Reported: en.reported, Confirmed: en.confirmed,
		Watermark: a.opts.Watermark, Preempt: a.opts.ResizePreempt, NextPiece: obs.next}
	if ps.nc.State != nil {
		in.AllocatedMemory = ps.nc.State.AllocatedMemoryBytes
	}
	in.Backoff, in.LastRejection = a.rejectionBackoff(pool.Name)
	in.Unrunnable = a.unrunnable(pool)
	plan := a.plan(ctx, pool, &in, obs.broken)

	if plan.NodeCtl != nil && ps.nc.Healthy {
		st, err := a.applyNodeCtl(ctx, pool, plan.NodeCtl)
		if err != nil {
			ps.nodeCtlErr = err
		} else {
			ps.nc.State = st
			en = a.enforced(pool)
			ps.applied = en.applied
			in.AllocatedMemory = st.AllocatedMemoryBytes
			if len(plan.Remove) == 0 && plan.Add == nil {
				// Decide the pieces against what node-ctl now runs (the lock may follow a
				// shrink).
				in.Applied, in.Reported, in.Confirmed = en.applied, en.reported, en.confirmed
				plan = a.plan(ctx, pool, &in, obs.broken)
			}
		}
	} else if plan.NodeCtl != nil && ps.nc.Polled {
		// node-ctl is down while the pool needs it: stopped when an earlier pool of this
		// node was deleted (the class was recreated), or its unit gave up. Start it the way
		// a reload that gets no answer does (the restart command, at most every 30 s).
		a.restartNodeCtl(ctx)
	}
	ps.plan = plan
	if err := a.applyPieces(ctx, pool, obs, plan); err != nil {
		return ps, err
	}
	if len(obs.broken) > 0 && plan.Add == nil && plan.Waiting == "" && !plan.NeedRoom &&
		lock.Covers(plan.Lock, lock.MaxOf(ps.desired, ps.applied)) {
		// Files of the pool's that do not parse: never counted in the lock; removed once
		// the lock is whole without them.
		log.Info("removing manifests of the pool that cannot be read", "pieces", obs.broken)
		if err := manifest.Remove(a.opts.ManifestDir, pool.Name, obs.broken...); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

// plan runs lock.Plan, reading the node's room when the decision needs it; broken are the
// numbers of the pool's manifests that cannot be read, whose pods are not leaving on their
// own.
func (a *Agent) plan(ctx context.Context, pool *v1alpha1.SandboxPool, in *lock.Input, broken []int) lock.Step {
	p := lock.Plan(*in)
	if !p.NeedRoom {
		return p
	}
	numbers := slices.Clone(broken)
	for _, pc := range in.Pieces {
		numbers = append(numbers, pc.Number)
	}
	r, err := a.roomOnNode(ctx, pool, numbers)
	if err != nil {
		// Without the room nothing that needs it moves; the pass is retried.
		logf.FromContext(ctx).Error(err, "reading the node's room")
		return p
	}
	in.Room = r
	return lock.Plan(*in)
}

// applyPieces writes and removes manifests as the plan says: the new piece first, or, for a
// replacement on a node without room for both, the old pieces first.
func (a *Agent) applyPieces(ctx context.Context, pool *v1alpha1.SandboxPool, obs observed, p lock.Step) error {
	log := logf.FromContext(ctx)
	for _, pc := range obs.pieces {
		switch {
		case !slices.Contains(p.Remove, pc.Number):
		case pc.State == lock.Rejected:
			a.noteRejection(pool, pc)
		case pc.Unrunnable:
			a.noteUnrunnable(pool, pc)
		}
	}
	remove := func() error {
		if len(p.Remove) == 0 {
			return nil
		}
		if err := manifest.Remove(a.opts.ManifestDir, pool.Name, p.Remove...); err != nil {
			return fmt.Errorf("removing placeholder pods of %s: %w", pool.Name, err)
		}
		log.Info("removed placeholder pods", "pieces", p.Remove)
		return nil
	}
	if p.Add != nil {
		// The number is kept before the file is written: once the file and its pod are gone
		// the number is still not used again, by this agent or the next one. A state file
		// that cannot be written does not hold the lock back: the numbers on disk and of the
		// node's mirror pods still keep a new piece off the names of pods kubelet may be
		// stopping, for as long as they are there.
		if err := a.keep(func(st *nodeState) { st.LastPiece = max(st.LastPiece, p.Add.Number) }); err != nil {
			log.Error(err, "keeping the piece number across restarts", "piece", p.Add.Number)
		}
	}
	add := func() error {
		if p.Add == nil {
			return nil
		}
		data, err := manifest.Render(a.pieceSpec(pool, p.Add.Number, p.Add.Res))
		if err != nil {
			return fmt.Errorf("rendering placeholder pod %d of %s: %w", p.Add.Number, pool.Name, err)
		}
		if _, err := manifest.Ensure(a.opts.ManifestDir, pool.Name, p.Add.Number, data); err != nil {
			return fmt.Errorf("writing placeholder pod %d of %s: %w", p.Add.Number, pool.Name, err)
		}
		manifestWrites.Inc()
		log.Info("wrote a placeholder pod", "piece", p.Add.Number, "file", manifest.FileName(pool.Name, p.Add.Number),
			"resources", lock.Text(p.Add.Res))
		return nil
	}
	if p.RemoveFirst && p.Add != nil {
		data, err := manifest.Render(a.pieceSpec(pool, p.Add.Number, p.Add.Res))
		if err != nil {
			return fmt.Errorf("rendering placeholder pod %d of %s: %w", p.Add.Number, pool.Name, err)
		}
		if err := manifest.Replace(a.opts.ManifestDir, pool.Name, p.Remove, p.Add.Number, data); err != nil {
			return err
		}
		manifestWrites.Inc()
		log.Info("replaced placeholder pods in place (no room for both)", "pieces", p.Remove, "by", p.Add.Number,
			"resources", lock.Text(p.Add.Res))
		return nil
	}
	if err := add(); err != nil {
		return err
	}
	return remove()
}

// defaulted runs the pool through the compiled CUE schema and returns it with every schema
// default filled in (the agent acts on the defaulted spec, so a default is never restated in
// Go). On error it returns the pool unchanged. The result for the pool's last
// resourceVersion is kept: most passes (node-ctl's polls, renewals, kubelet's status
// writes) see the pool unchanged, and a pass need not pay CUE's evaluation again for it.
// Passes are serialised (syncMu), so the memo needs no lock of its own.
func (a *Agent) defaulted(pool *v1alpha1.SandboxPool) (*v1alpha1.SandboxPool, error) {
	key := defaultedKey{uid: pool.UID, resourceVersion: pool.ResourceVersion}
	if m, ok := a.defaults[pool.Name]; ok && key.resourceVersion != "" && m.key == key {
		return m.pool.DeepCopy(), nil
	}
	p := pool.DeepCopy()
	p.APIVersion, p.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.KindSandboxPool
	p.ManagedFields = nil
	a.schemaEvaluations++
	d, err := schema.DefaultAs(a.schema, schema.KindSandboxPool, p)
	if err != nil {
		delete(a.defaults, pool.Name)
		return pool, err
	}
	// The schema covers what users write; keep the server's metadata as it is.
	d.ObjectMeta = pool.ObjectMeta
	if a.defaults == nil {
		a.defaults = map[string]defaultedPool{}
	}
	a.defaults[pool.Name] = defaultedPool{key: key, pool: d.DeepCopy()}
	return d, nil
}

// defaultedKey names one stored version of a pool.
type defaultedKey struct {
	uid             types.UID
	resourceVersion string
}

// defaultedPool is the defaulted pool of one stored version.
type defaultedPool struct {
	key  defaultedKey
	pool *v1alpha1.SandboxPool
}

// effectiveResources is the override's policy when enabled, else the class snapshot.
func effectiveResources(pool *v1alpha1.SandboxPool) corev1.ResourceList {
	if o := pool.Spec.Override; o != nil && ptr.Deref(o.Enabled, false) && len(o.ResourcePolicy.Resources) > 0 {
		return o.ResourcePolicy.Resources.DeepCopy()
	}
	return pool.Spec.ResourcePolicy.Resources.DeepCopy()
}

// enforcement is what node-ctl may be enforcing for a pool, as far as the agent knows.
type enforcement struct {
	// applied is the most node-ctl may be enforcing: of what it last reported applied and of
	// the config the agent last wrote (node-ctl may take that at any reload or restart,
	// whether or not the agent heard it answer). nil when neither is for the pool.
	applied corev1.ResourceList
	// reported is what node-ctl last reported applied, nil when it reported nothing for the
	// pool.
	reported corev1.ResourceList
	// confirmed: node-ctl reported applying the config the agent last wrote.
	confirmed bool
}

// enforced is what node-ctl may be enforcing for pool. A node-ctl that does not answer is
// never taken to enforce nothing: what it last reported counts, from this agent's polls or,
// before the first one answered, as kept in the state file from before the agent's start.
func (a *Agent) enforced(pool *v1alpha1.SandboxPool) enforcement {
	a.mu.Lock()
	rep := reportedOf(a.nc.State)
	if a.nc.State == nil {
		rep = a.kept.NodeCtl
	}
	sent := a.sent
	a.mu.Unlock()
	var e enforcement
	if rep != nil && rep.Pool.UID == string(pool.UID) {
		e.reported = quantities(rep.Resources)
	}
	var written corev1.ResourceList
	if sent != nil && sent.Pool.UID == string(pool.UID) {
		written = quantities(sent.Resources)
	}
	e.confirmed = e.reported != nil && (written == nil || maps.Equal(rep.Resources, sent.Resources))
	if e.reported != nil || written != nil {
		e.applied = lock.MaxOf(e.reported, written)
	}
	return e
}

// quantities parses a node-ctl resource map; a quantity that does not parse is left out.
func quantities(m map[string]string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range m {
		if q, err := resource.ParseQuantity(v); err == nil {
			out[corev1.ResourceName(k)] = q
		}
	}
	return out
}

// poolGone handles a pool that is deleted or being deleted: its manifest goes (kubelet then
// removes the pod and the controller releases the pool), and node-ctl is stopped, once.
// A resize replaces pieces but never gets here: node-ctl is stopped only when the pool is
// really gone.
func (a *Agent) poolGone(ctx context.Context, name string, uid types.UID) error {
	if err := manifest.RemovePool(a.opts.ManifestDir, name); err != nil {
		return fmt.Errorf("removing the manifests of %s: %w", name, err)
	}
	a.forgetShims(name)
	delete(a.defaults, name)
	a.mu.Lock()
	delete(a.poolStates, name)
	a.mu.Unlock()
	a.stopNodeCtl(ctx, name, uid)
	return nil
}
