package agent

import (
	"context"
	"errors"
	"time"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// pollNodeCtl reads node-ctl's health and state every NodeCtlPollInterval and re-runs the
// pools' reconcile when something that matters changed: reachability, what is applied, the
// zone, or the memory in use (which decides a deferred downscale).
func (a *Agent) pollNodeCtl(ctx context.Context) error {
	tick := time.NewTicker(a.opts.NodeCtlPollInterval)
	defer tick.Stop()
	for {
		a.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (a *Agent) pollOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.NodeCtlPollInterval)
	defer cancel()
	now := a.opts.Clock.Now()
	_, herr := a.nodectl.Health(ctx)
	var st *api.State
	if herr == nil {
		s, err := a.nodectl.State(ctx)
		if err != nil {
			herr = err
		} else {
			st = s
		}
	}
	a.mu.Lock()
	old := a.nc
	nc := nodeCtlView{Polled: true, Healthy: herr == nil, DownSince: old.DownSince, LastOK: old.LastOK, State: old.State}
	if herr == nil {
		nc.DownSince, nc.LastOK, nc.State = nil, now, st
	} else {
		nc.Err = herr.Error()
		if old.DownSince == nil || old.Healthy || !old.Polled {
			nc.DownSince = ptr.To(now)
		}
	}
	a.nc = nc
	a.mu.Unlock()
	if herr == nil {
		nodeCtlUp.Set(1)
	} else {
		nodeCtlUp.Set(0)
	}
	if changedMaterially(old, nc) {
		a.triggerAll(ctx)
	}
	a.checkShims()
}

// changedMaterially is true when a poll's result can change a pass's outcome.
func changedMaterially(old, now nodeCtlView) bool {
	if old.Polled != now.Polled || old.Healthy != now.Healthy || (old.State == nil) != (now.State == nil) {
		return true
	}
	if now.State == nil {
		return false
	}
	o, n := old.State, now.State
	if o.AppliedGeneration != n.AppliedGeneration || o.Pool != n.Pool || o.Zone != n.Zone || !o.StartedAt.Equal(n.StartedAt) ||
		o.AllocatableMemoryBytes != n.AllocatableMemoryBytes || len(o.AppliedResources) != len(n.AppliedResources) {
		return true
	}
	for k, v := range n.AppliedResources {
		if o.AppliedResources[k] != v {
			return true
		}
	}
	d := n.AllocatedMemoryBytes - o.AllocatedMemoryBytes
	return d >= allocatedStep(n.AllocatableMemoryBytes) || -d >= allocatedStep(n.AllocatableMemoryBytes)
}

// renewLeases renews the Lease of every pool of the node every LeaseRenewInterval: the
// controller's only signal that this agent lives (docs/design.md §3.4).
func (a *Agent) renewLeases(ctx context.Context) error {
	tick := time.NewTicker(a.opts.LeaseRenewInterval)
	defer tick.Stop()
	for {
		if pools, err := a.pools(ctx); err == nil {
			for _, p := range pools {
				if p.DeletionTimestamp == nil {
					a.renewLease(ctx, p.Name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// renewLease updates the pool's Lease with the copy it holds; it GETs (or creates) the Lease
// only when it has none or the update conflicts.
func (a *Agent) renewLease(ctx context.Context, pool string) {
	a.renewMu.Lock()
	defer a.renewMu.Unlock()
	log := logf.FromContext(ctx).WithValues("pool", pool)
	now := metav1.NewMicroTime(a.opts.Clock.Now())
	a.mu.Lock()
	l := a.leases[pool]
	a.mu.Unlock()
	err := errors.New("no lease held")
	if l != nil {
		l = l.DeepCopy()
		l.Spec.RenewTime = &now
		err = a.leaseWriter().Update(ctx, l)
	}
	if err != nil {
		l, err = a.getOrCreateLease(ctx, pool, now)
	}
	if err != nil {
		leaseRenewals.WithLabelValues("error").Inc()
		log.Error(err, "renewing the lease"+leaseErrorHint(err))
		return
	}
	leaseRenewals.WithLabelValues("ok").Inc()
	a.mu.Lock()
	a.leases[pool] = l
	a.mu.Unlock()
}

// holdsLease reports whether the agent holds the pool's Lease (renewed it at least once).
func (a *Agent) holdsLease(pool string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leases[pool] != nil
}

func (a *Agent) getOrCreateLease(ctx context.Context, pool string, now metav1.MicroTime) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: a.opts.LeaseNamespace, Name: pool}
	var l coordinationv1.Lease
	err := a.leaseWriter().Get(ctx, key, &l)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{v1alpha1.LabelNode: naming.LabelValue(a.opts.NodeName)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.opts.NodeName),
				LeaseDurationSeconds: ptr.To(int32(a.opts.LeaseTTL / time.Second)), AcquireTime: &now, RenewTime: &now},
		}
		return &l, a.leaseWriter().Create(ctx, &l)
	case err != nil:
		return nil, err
	}
	l.Spec.RenewTime = &now
	l.Spec.HolderIdentity = ptr.To(a.opts.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(a.opts.LeaseTTL / time.Second))
	return &l, a.leaseWriter().Update(ctx, &l)
}

// watchManifests re-runs a pool's reconcile when its manifest file changes (fsnotify), and
// every pool's every ManifestVerifyInterval: a deleted or edited manifest is restored.
func (a *Agent) watchManifests(ctx context.Context) error {
	return manifest.Watch(ctx, a.opts.ManifestDir, a.opts.ManifestVerifyInterval,
		func(key string) { manifestEvents.Inc(); a.triggerFileKey(ctx, key) },
		func() { a.triggerAll(ctx) })
}

// triggerFileKey re-runs the reconcile of the pool whose manifest file is named with key
// (the pool name, or its hashed form for very long names: manifest.FileKey). A file of no
// pool of this node is left alone; only the start-up cleanup removes files.
func (a *Agent) triggerFileKey(ctx context.Context, key string) {
	pools, err := a.pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		if manifest.FileKey(p.Name) == key {
			a.trigger(p.Name)
		}
	}
}

func logOrphanReport(log logr.Logger, r manifest.Report) {
	for _, d := range r.Removed {
		log.Info("removed orphaned manifest", "file", d.Path, "pool", d.PoolName, "reason", d.Reason, "error", d.Err)
	}
	for _, d := range r.Kept {
		log.Info("kept manifest at start-up", "file", d.Path, "pool", d.PoolName, "reason", d.Reason, "error", d.Err)
	}
}
