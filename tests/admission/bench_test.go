package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentcube/sandboxpool/tests/support"
)

// BenchmarkStatusPatchThroughAPIServer measures what a node's status write pays for the
// webhook: the same merge patch of its pool's status, by the node's own identity, through
// the real API server, with the ValidatingWebhookConfiguration registered and then removed,
// in one run. Reports p50/p99 of both and the added p99.
//
//	make tools && KUBEBUILDER_ASSETS=$(ls -d .tools/controlplane-*) \
//	  go test -run '^$' -bench StatusPatchThroughAPIServer -benchtime 400x ./tests/admission/
func BenchmarkStatusPatchThroughAPIServer(b *testing.B) {
	requireCluster(b)
	ctx := context.Background()
	createPool(b, "bench-node", "c1")
	node := nodeClient(b, "bench-node")
	other := nodeClient(b, "bench-other")
	patch := func(i int) time.Duration {
		p := fmt.Sprintf(`{"status":{"poolInfo":{"zone":"zone-a","allocatedMemoryBytes":%d}}}`, i)
		start := time.Now()
		if err := mergeStatus(node, poolName("bench-node"), p); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	measure := func() []time.Duration {
		out := make([]time.Duration, 0, b.N)
		for i := range b.N {
			out = append(out, patch(i+1))
		}
		slices.Sort(out)
		return out
	}
	whs := kubernetes.NewForConfigOrDie(cp.Config).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	list, err := whs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		b.Fatalf("want the one webhook configuration, got %d (%v)", len(list.Items), err)
	}
	saved := list.Items[0].DeepCopy()
	for range 20 { // warm connections and caches
		patch(0)
	}
	b.ResetTimer()
	with := measure()
	b.StopTimer()
	if err := whs.Delete(ctx, saved.Name, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	waitWebhook(b, other, false)
	without := measure()
	saved.ResourceVersion, saved.UID = "", ""
	if _, err := whs.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitWebhook(b, other, true)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(float64(len(d)-1)*p)].Microseconds())
	}
	b.ReportMetric(q(with, 0.5), "with-p50-µs")
	b.ReportMetric(q(with, 0.99), "with-p99-µs")
	b.ReportMetric(q(without, 0.5), "without-p50-µs")
	b.ReportMetric(q(without, 0.99), "without-p99-µs")
	b.ReportMetric(q(with, 0.99)-q(without, 0.99), "added-p99-µs")
}

// waitWebhook polls until the API server applies (present) or no longer applies the
// webhook: another node's write to the bench pool is denied only while it is registered.
func waitWebhook(b *testing.B, other dynamic.Interface, present bool) {
	b.Helper()
	support.Eventually(b, fmt.Sprintf("webhook present=%v", present), 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		err := mergeStatus(other, poolName("bench-node"), `{"status":{"poolInfo":{"zone":"probe"}}}`)
		return (err != nil) == present, fmt.Sprintf("another node's write: %v", err)
	})
}
