package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

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
	l := a.poolStateLocked(pool).lease
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
	a.poolStateLocked(pool).lease = l
	a.mu.Unlock()
}

// holdsLease reports whether the agent holds the pool's Lease (renewed it at least once).
func (a *Agent) holdsLease(pool string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.poolStates[pool]
	return st != nil && st.lease != nil
}

// getOrCreateLease creates the pool's Lease, held by this node; when it exists already (an
// earlier run of this agent made it) it reads it and renews it. A new pool's Lease is one
// request: the create.
func (a *Agent) getOrCreateLease(ctx context.Context, pool string, now metav1.MicroTime) (*coordinationv1.Lease, error) {
	key := types.NamespacedName{Namespace: a.opts.LeaseNamespace, Name: pool}
	l := coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{v1alpha1.LabelNode: naming.LabelValue(a.opts.NodeName)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.opts.NodeName),
			LeaseDurationSeconds: ptr.To(int32(a.opts.LeaseTTL / time.Second)), AcquireTime: &now, RenewTime: &now},
	}
	err := a.leaseWriter().Create(ctx, &l)
	if !apierrors.IsAlreadyExists(err) {
		return &l, err
	}
	l = coordinationv1.Lease{}
	if err := a.leaseWriter().Get(ctx, key, &l); err != nil {
		return nil, err
	}
	l.Spec.RenewTime = &now
	l.Spec.HolderIdentity = ptr.To(a.opts.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(a.opts.LeaseTTL / time.Second))
	return &l, a.leaseWriter().Update(ctx, &l)
}

// leaseWriter is the client the pools' Leases are written with: the --lease-kubeconfig
// identity when one is set, the agent's own otherwise.
func (a *Agent) leaseWriter() client.Client {
	if a.leaseClient != nil {
		return a.leaseClient
	}
	return a.client
}

// leaseErrorHint adds the fix to a Lease error an operator would otherwise have to decode:
// the NodeRestriction admission plugin refusing a node identity any Lease but its own.
func leaseErrorHint(err error) string {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "kube-node-lease") {
		return " (the NodeRestriction admission plugin lets a node identity write only its own Lease in kube-node-lease:" +
			" give the agent --lease-kubeconfig with its per-node service account, docs/operator-guide.md)"
	}
	return ""
}
