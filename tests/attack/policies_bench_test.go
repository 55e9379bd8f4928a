package attack

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// nodePolicyBindings are the bindings of the API server's own admission policies
// (deploy/rbac/node-policy.yaml, deploy/placeholder-pod-policy.yaml).
var nodePolicyBindings = []string{
	"sandbox-pool-node-lease", "sandbox-pool-node-events", "sandbox-pool-event-reporters", "sandbox-pool-node-lease-tokens",
	"sandbox-pool-placeholder-pods", "sandbox-pool-placeholder-pod-deletion",
}

// BenchmarkNodePoliciesThroughAPIServer measures what the API server's own admission
// policies add to the writes a node makes most, through the real API server: its agent's
// Lease renewal (as its Lease identity, a token bound to its Node), kubelet's status write
// of its placeholder pod's mirror pod, and kubelet's event about it, each with every binding
// of the policies in place and with all of them removed, in four alternating blocks of one
// run. A dry-run probe confirms each switch before a block starts. Reports p50/p99 of each
// write with and without, and the added p50/p99.
//
//	make tools && KUBEBUILDER_ASSETS=$(ls -d .tools/controlplane-*) \
//	  go test -run '^$' -bench NodePoliciesThroughAPIServer -benchtime 400x ./tests/attack/
func BenchmarkNodePoliciesThroughAPIServer(b *testing.B) {
	suite.Require(b)
	ctx := context.Background()
	// The Lease node-a's agent renews.
	leases := ids[leaseA].kube.CoordinationV1().Leases(leaseNS)
	l := nodeALease(ctx, b)
	// node-a's mirror pod, as its kubelet creates it.
	pods := ids[nodeA].kube.CoreV1().Pods(v1alpha1.DefaultPodNamespace)
	// (The Node authorizer lets a node read only pods that exist and are bound to it.)
	pod, err := ids[admin].kube.CoreV1().Pods(v1alpha1.DefaultPodNamespace).Get(ctx, "sandbox-pool-7-"+nodeA, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pod, err = pods.Create(ctx, placeholderPod(v1alpha1.DefaultPodNamespace, "sandbox-pool-7-"+nodeA, nodeA, true, true, v1alpha1.DefaultRuntimeClassName), metav1.CreateOptions{})
	}
	if err != nil {
		b.Fatal(err)
	}
	events := ids[nodeA].kube.CoreV1().Events(v1alpha1.DefaultPodNamespace)
	event := kubeletRejection(nodeA, nodeA, nodeA)
	event.InvolvedObject.Name = pod.Name
	event.GenerateName = "bench-"

	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	writes := []struct {
		name string
		do   func() time.Duration
	}{
		{"lease-renewal", func() time.Duration {
			l.Spec.RenewTime = ptr.To(metav1.NowMicro())
			return timed(func() (err error) {
				l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				return err
			})
		}},
		{"pod-status", func() time.Duration {
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastProbeTime: metav1.Now()}}
			return timed(func() (err error) {
				pod, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return err
			})
		}},
		{"kubelet-event", func() time.Duration {
			e := event.DeepCopy()
			e.FirstTimestamp, e.LastTimestamp, e.Count = metav1.Now(), metav1.Now(), 1
			return timed(func() error {
				_, err := events.Create(ctx, e, metav1.CreateOptions{})
				return err
			})
		}},
	}

	bindings := ids[admin].kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	saved := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, name := range nodePolicyBindings {
		got, err := bindings.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		saved[name] = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: got.Spec}
	}
	// Probes that each policy family refuses: another node's Lease, a tenant's pod with the
	// pool's label, an event in the controller's name.
	forgedLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-probe-node"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("probe-node")}}
	forgedPod := placeholderPod(tenantNS, "probe", nodeA, false, true, "")
	forgedEvent := event.DeepCopy()
	forgedEvent.Source.Host, forgedEvent.ReportingInstance = nodeB, nodeB
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	setPolicies := func(on bool) {
		for _, name := range nodePolicyBindings {
			_, err := bindings.Get(ctx, name, metav1.GetOptions{})
			switch {
			case on && err == nil, !on && apierrors.IsNotFound(err):
			case on:
				if _, err := bindings.Create(ctx, saved[name].DeepCopy(), metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			default:
				if err := bindings.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, leaseErr := leases.Create(ctx, forgedLease, dryRun)
			_, podErr := ids[tenant].kube.CoreV1().Pods(tenantNS).Create(ctx, forgedPod, dryRun)
			e := forgedEvent.DeepCopy()
			e.FirstTimestamp, e.LastTimestamp, e.Count = metav1.Now(), metav1.Now(), 1
			_, eventErr := events.Create(ctx, e, dryRun)
			return apierrors.IsForbidden(leaseErr) == on && apierrors.IsForbidden(podErr) == on && apierrors.IsForbidden(eventErr) == on, nil
		})
		if err != nil {
			b.Fatalf("the node policies on=%v not in effect within 30s", on)
		}
	}
	for range 20 { // warm connections and caches
		for _, w := range writes {
			w.do()
		}
	}
	with := map[string][]time.Duration{}
	without := map[string][]time.Duration{}
	const blocks = 4
	setPolicies(true)
	b.ResetTimer()
	for i := range blocks {
		n := b.N / blocks
		if i == blocks-1 {
			n = b.N - (blocks-1)*(b.N/blocks)
		}
		for _, side := range []struct {
			on  bool
			out map[string][]time.Duration
		}{{true, with}, {false, without}} {
			b.StopTimer()
			setPolicies(side.on)
			b.StartTimer()
			for range n {
				for _, w := range writes {
					side.out[w.name] = append(side.out[w.name], w.do())
				}
			}
		}
	}
	b.StopTimer()
	setPolicies(true)
	b.ReportMetric(0, "ns/op") // the figures are the percentiles below
	q := func(d []time.Duration, p float64) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)].Microseconds())
	}
	for _, w := range writes {
		b.ReportMetric(q(with[w.name], 0.5), w.name+"-with-p50-µs")
		b.ReportMetric(q(with[w.name], 0.99), w.name+"-with-p99-µs")
		b.ReportMetric(q(without[w.name], 0.5), w.name+"-without-p50-µs")
		b.ReportMetric(q(without[w.name], 0.99), w.name+"-without-p99-µs")
		b.ReportMetric(q(with[w.name], 0.5)-q(without[w.name], 0.5), w.name+"-added-p50-µs")
		b.ReportMetric(q(with[w.name], 0.99)-q(without[w.name], 0.99), w.name+"-added-p99-µs")
	}
}
