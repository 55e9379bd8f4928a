package operator

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestLeaseRenewals: when the controller counts a Lease renewed is when it saw the write,
// by its own clock; the renewTime written counts only the first time it sees the Lease, and
// never later than that moment.
func TestLeaseRenewals(t *testing.T) {
	const ttl = 40 * time.Second
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	far := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	rv := 0
	lease := func(renew *time.Time) *coordinationv1.Lease {
		rv++
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-n", ResourceVersion: strconv.Itoa(rv)}}
		if renew != nil {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*renew))
		}
		return l
	}
	type step struct {
		now      time.Time
		renew    *time.Time // renewTime written; nil: none
		sameRV   bool       // the same resourceVersion as the step before (no write)
		wantSeen time.Time  // when the controller counts it renewed
	}
	at := func(d time.Duration) *time.Time { return ptr.To(t0.Add(d)) }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first sight: a recent renewal counts as written", []step{{t0, at(-10 * time.Second), false, t0.Add(-10 * time.Second)}}},
		{"first sight: an old renewal is expired at once", []step{{t0, at(-time.Hour), false, t0.Add(-time.Hour)}}},
		{"first sight: a renewal in the future counts as now", []step{{t0, &far, false, t0}}},
		{"first sight: no renewTime is never renewed", []step{{t0, nil, false, time.Time{}}}},
		{"a forged future renewTime, then nothing: one TTL from the write", []step{
			{t0, at(-5 * time.Second), false, t0.Add(-5 * time.Second)},
			{t0.Add(time.Second), &far, false, t0.Add(time.Second)},
			{t0.Add(time.Minute), &far, true, t0.Add(time.Second)},
		}},
		{"the same resourceVersion again renews nothing", []step{
			{t0, at(0), false, t0},
			{t0.Add(30 * time.Second), at(0), true, t0},
		}},
		{"a write that leaves renewTime alone renews nothing", []step{
			{t0, at(0), false, t0},
			{t0.Add(30 * time.Second), at(0), false, t0},
		}},
		{"renewals count when seen, whatever time they carry", []step{
			{t0, at(0), false, t0},
			{t0.Add(12 * time.Second), at(10 * time.Second), false, t0.Add(12 * time.Second)},
			{t0.Add(25 * time.Second), &far, false, t0.Add(25 * time.Second)},
			{t0.Add(33 * time.Second), at(30 * time.Second), false, t0.Add(33 * time.Second)},
		}},
		{"a renewTime moved to the far past extends nothing", []step{
			{t0, at(0), false, t0},
			{t0.Add(30 * time.Second), at(-time.Hour), false, t0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r leaseRenewals
			var l *coordinationv1.Lease
			for i, s := range tc.steps {
				if !s.sameRV || l == nil {
					l = lease(s.renew)
				}
				if got := r.observe(l, s.now, ttl); !got.Equal(s.wantSeen) {
					t.Errorf("step %d: counted renewed at %s, want %s", i+1, got, s.wantSeen)
				}
			}
		})
	}
}

// TestForgedRenewTimeExpires: a Lease held by the pool's node whose renewTime says 2099 keeps
// the pool's agent healthy for one TTL after the controller saw the write, and not a moment
// longer, on the controller's (fake) clock; a renewal seen later makes it healthy again.
func TestForgedRenewTimeExpires(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newNodeGoneFixture(t, t0)
	r := f.reconciler()
	ctx := context.Background()
	var pool v1alpha1.SandboxPool
	if err := f.c.Get(ctx, f.pool, &pool); err != nil {
		t.Fatal(err)
	}
	write := func(renew time.Time) {
		var l coordinationv1.Lease
		if err := f.c.Get(ctx, f.lease, &l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renew))
		if err := f.c.Update(ctx, &l); err != nil {
			t.Fatal(err)
		}
	}
	healthy := func(when string, want bool, wantLeft time.Duration) {
		t.Helper()
		c, left, err := r.agentCondition(ctx, &pool, f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Status == metav1.ConditionTrue; got != want || left != wantLeft {
			t.Errorf("%s: healthy %v (%s: %s), expiry in %s; want %v, %s", when, got, c.Reason, c.Message, left, want, wantLeft)
		}
	}
	healthy("the fixture's Lease, renewed an hour ago", false, 0)
	write(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	f.clock.SetTime(t0.Add(time.Second))
	healthy("just after the forged write", true, DefaultLeaseTTL)
	f.clock.SetTime(t0.Add(time.Second + DefaultLeaseTTL - time.Millisecond))
	healthy("a millisecond before one TTL", true, time.Millisecond)
	f.clock.SetTime(t0.Add(time.Second + DefaultLeaseTTL))
	healthy("one TTL after the forged write", false, 0)
	f.clock.SetTime(t0.Add(time.Hour))
	healthy("an hour later", false, 0)
	write(t0.Add(time.Hour))
	healthy("a renewal seen", true, DefaultLeaseTTL)
}
