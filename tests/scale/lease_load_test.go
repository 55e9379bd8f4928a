package scale

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/hollow"
)

// leaseLoadEnv sets the sizes of TestLeaseLoad (make bench-lease-load), e.g. "10000".
const leaseLoadEnv = "SANDBOXPOOL_LEASE_LOAD"

// TestLeaseLoad asks whether this API server can carry the design's steady Lease load at
// sizes the hollow-node fan-out cannot reach in the time budget: N Leases, each updated once
// per renewInterval (N/10 per second, spread evenly) by a plain client-go loop, for one
// minute. No agents and no controller run: it measures the API server and etcd under the
// renewals alone — what §5's "1,000 Lease renewals/s at 10,000 nodes" costs here.
func TestLeaseLoad(t *testing.T) {
	if os.Getenv(BenchEnv) == "" || os.Getenv(leaseLoadEnv) == "" {
		t.Skipf("set %s=1 and %s=<sizes> to run (make bench-lease-load)", BenchEnv, leaseLoadEnv)
	}
	for _, n := range parseSizes(t, os.Getenv(leaseLoadEnv)) {
		t.Run(fmt.Sprintf("leases=%d", n), func(t *testing.T) { leaseLoad(t, n, time.Minute) })
	}
}

func leaseLoad(t *testing.T, n int, window time.Duration) {
	cp, err := framework.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	e := setUpCluster(t, cp)
	ctx := context.Background()
	apiPID, err := cp.APIServerPID()
	if err != nil {
		t.Fatal(err)
	}
	etcdPID, err := cp.EtcdPID()
	if err != nil {
		t.Fatal(err)
	}
	leases := make([]*coordinationv1.Lease, n)
	now := metav1.NewMicroTime(time.Now())
	if err := hollow.Parallel(n, 64, func(i int) error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultLeaseNamespace, Name: fmt.Sprintf("load-%05d", i)},
			Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
		leases[i] = l
		return e.admin.Create(ctx, l)
	}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := float64(n) / renewInterval.Seconds()
	// One goroutine per 1/100 of the Leases, each renewing its share in turn, paced so
	// that every Lease is renewed once per renewInterval.
	const shards = 100
	var (
		mu    sync.Mutex
		lats  []time.Duration
		fails int
	)
	etcdURL := cp.Env.ControlPlane.Etcd.URL.String()
	c0 := readCounters(t, ctx, cs, etcdURL, nil)
	a0, e0 := sample(t, apiPID), sample(t, etcdPID)
	began := time.Now()
	var wg sync.WaitGroup
	for s := range shards {
		wg.Go(func() {
			mine := leases[s*n/shards : (s+1)*n/shards]
			if len(mine) == 0 {
				return
			}
			step := renewInterval / time.Duration(len(mine))
			next := began.Add(time.Duration(s) * renewInterval / shards / time.Duration(len(mine)))
			for i := 0; time.Since(began) < window; i++ {
				time.Sleep(time.Until(next)) // pacing of the load, not a synchronisation
				next = next.Add(step)
				l := mine[i%len(mine)]
				rt := metav1.NewMicroTime(time.Now())
				l.Spec.RenewTime = &rt
				start := time.Now()
				err := e.admin.Update(ctx, l)
				d := time.Since(start)
				mu.Lock()
				if err != nil {
					fails++
				} else {
					lats = append(lats, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	c1 := readCounters(t, ctx, cs, etcdURL, nil)
	a1, e1 := sample(t, apiPID), sample(t, etcdPID)
	got := (c1.requests["PUT leases"] - c0.requests["PUT leases"]) / elapsed.Seconds()
	slices.Sort(lats)
	t.Logf("FIGURE lease-load leases=%d: wanted %.0f updates/s, the API server counted %.0f/s (%d failed); update latency p50=%s p99=%s; kube-apiserver cpu=%.2f cores rss=%dMiB, etcd cpu=%.2f cores rss=%dMiB; load %v",
		n, want, got, fails, pct(lats, 50), pct(lats, 99), a1.CoresSince(a0), a1.RSSKiB/1024, e1.CoresSince(e0), e1.RSSKiB/1024, loadAvg())
}
