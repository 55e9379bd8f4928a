package attack

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// BenchmarkLeaseRenewalNodePolicy measures what the node Lease policy adds to a renewal: the
// agent's renewal (an update of the Lease it holds, as its Lease identity, a service-account
// token) through the real API server with the policy's binding in place and removed, in
// alternating blocks of one run. Reports p50/p99 of both and the added p99.
//
//	make tools && KUBEBUILDER_ASSETS=$(ls -d .tools/controlplane-*) \
//	  go test -run '^$' -bench LeaseRenewalNodePolicy -benchtime 400x ./tests/attack/
func BenchmarkLeaseRenewalNodePolicy(b *testing.B) {
	suite.Require(b)
	ctx := context.Background()
	leases := ids[leaseA].kube.CoordinationV1().Leases(leaseNS)
	// node-a's own Lease, renewed as its agent renews it: an update of the copy it holds.
	l := nodeALease(ctx, b)
	renew := func() time.Duration {
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		start := time.Now()
		out, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		l = out
		return took
	}
	bindings := ids[admin].kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	saved, err := bindings.Get(ctx, "sandbox-pool-node-lease", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	saved = saved.DeepCopy()
	setPolicy := func(on bool) {
		_, err := bindings.Get(ctx, saved.Name, metav1.GetOptions{})
		switch {
		case on && err == nil, !on && apierrors.IsNotFound(err):
		case on:
			restore := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: saved.Name}, Spec: saved.Spec}
			if _, err := bindings.Create(ctx, restore, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		default:
			if err := bindings.Delete(ctx, saved.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		// The API server applies a binding change a moment later: wait until a forged
		// write (a dry run of another node's Lease) meets the policy, or no longer does.
		probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-probe-node"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("probe-node")}}
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := leases.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsForbidden(err) == on, nil
		})
		if err != nil {
			b.Fatalf("the node Lease policy on=%v not in effect within 30s", on)
		}
	}
	for range 20 { // warm connections and caches
		renew()
	}
	setPolicy(true) // the policy is in place: a forged write is refused
	var with, without []time.Duration
	const blocks = 4
	b.ResetTimer()
	for i := range blocks {
		n := b.N / blocks
		if i == blocks-1 {
			n = b.N - (blocks-1)*(b.N/blocks)
		}
		for range n {
			with = append(with, renew())
		}
		setPolicy(false)
		for range n {
			without = append(without, renew())
		}
		setPolicy(true)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op") // the figures are the percentiles below
	slices.Sort(with)
	slices.Sort(without)
	q := func(d []time.Duration, p float64) float64 { return float64(d[int(float64(len(d)-1)*p)].Microseconds()) }
	b.ReportMetric(q(with, 0.5), "with-p50-µs")
	b.ReportMetric(q(with, 0.99), "with-p99-µs")
	b.ReportMetric(q(without, 0.5), "without-p50-µs")
	b.ReportMetric(q(without, 0.99), "without-p99-µs")
	b.ReportMetric(q(with, 0.99)-q(without, 0.99), "added-p99-µs")
	b.ReportMetric(q(with, 0.5)-q(without, 0.5), "added-p50-µs")
}

// nodeALease is node-a's pool's Lease as its agent holds it, created if it is not there yet.
func nodeALease(ctx context.Context, b *testing.B) *coordinationv1.Lease {
	b.Helper()
	leases := ids[leaseA].kube.CoordinationV1().Leases(leaseNS)
	l, err := leases.Get(ctx, poolA, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: poolA},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeA), LeaseDurationSeconds: ptr.To(int32(40))}}, metav1.CreateOptions{})
	}
	if err != nil {
		b.Fatal(err)
	}
	return l
}
