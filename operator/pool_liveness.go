package operator

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// leaseRenewals is the controller's own record of the agents' renewals: when it saw each
// pool's Lease renewed, by its own clock, as the node lifecycle controller keeps its probe
// timestamps. A renewal is a write to the Lease that moves spec.renewTime; the time it
// counts for is the moment the controller saw it, never the renewTime the node wrote. So
// a renewTime far in the future keeps a pool healthy for one TTL after the write, not
// until then, and a node that stops writing expires whatever it last wrote.
//
// What a Lease is the first time the controller sees it (at its start, or when it becomes
// the leader) is the only time the written value counts: as renewTime (acquireTime if it
// has none), but never later than that moment. A Lease last renewed long ago is expired at
// once; one that claims the future counts as renewed now and expires one TTL later unless
// the controller sees it renewed again.
type leaseRenewals struct {
	mu   sync.Mutex // guards seen
	seen map[string]leaseSeen
}

// leaseSeen is what the controller last saw of one Lease.
type leaseSeen struct {
	resourceVersion string
	renewTime       time.Time // as written; a change of it is a renewal
	at              time.Time // when the controller counts the Lease renewed, by its clock
}

// observe records lease as seen at now and returns when the controller counts it last
// renewed (zero: never). A write that does not move renewTime (a label, a holder change)
// renews nothing, nor does one that moves it to before now-ttl: a node's stale time
// extends nothing either.
func (l *leaseRenewals) observe(lease *coordinationv1.Lease, now time.Time, ttl time.Duration) time.Time {
	written := writtenRenewTime(lease)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]leaseSeen{}
	}
	prev, ok := l.seen[lease.Name]
	switch {
	case !ok:
		prev = leaseSeen{at: written}
		if written.After(now) {
			prev.at = now
		}
	case prev.resourceVersion != lease.ResourceVersion && !written.Equal(prev.renewTime) && written.After(now.Add(-ttl)):
		prev.at = now
	}
	prev.resourceVersion, prev.renewTime = lease.ResourceVersion, written
	l.seen[lease.Name] = prev
	return prev.at
}

// forget drops what the controller saw of the Lease name (it was deleted).
func (l *leaseRenewals) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, name)
}

// writtenRenewTime is the Lease's renewTime as written, its acquireTime when it has none,
// zero when it has neither.
func writtenRenewTime(lease *coordinationv1.Lease) time.Time {
	switch {
	case lease.Spec.RenewTime != nil:
		return lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		return lease.Spec.AcquireTime.Time
	}
	return time.Time{}
}
