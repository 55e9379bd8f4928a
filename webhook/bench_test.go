package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/webhook"
)

// benchInventory is a cluster of n pools on other nodes, so the CREATE rule's lookup runs
// against a realistic inventory.
func benchInventory(n int) policy.Option {
	pools := make(map[string]policy.PoolRef, n)
	for i := range n {
		node := fmt.Sprintf("node-%05d", i)
		pools["placeholder-"+node] = policy.PoolRef{Class: "default", NodeName: node}
	}
	return policy.WithInventory(pools)
}

// benchSeq numbers the requests of every benchmark in the process, so that each request
// is new, as the webhook's requests are: a CREATE is of a new object, a status write
// carries a new figure or time.
var benchSeq atomic.Int64

// benchRequest is a kind of request and how to make a new one of it.
type benchRequest struct {
	name string
	next func() *admissionv1.AdmissionRequest
}

// benchRequests are the requests the webhook mostly sees: a class CREATE by an admin, a
// pool CREATE by the controller for a new node, a small status UPDATE by the pool's node
// (node-ctl back up, with its heartbeat), and the agent's common write as the API server
// sends it (policytest.StatusWrite: one node-ctl figure changed in a full status, with
// the managedFields of both writers).
func benchRequests(t testing.TB) []benchRequest {
	oldStatus := strings.Replace(poolStatusJSON, `"connected":true`, `"connected":false`, 1)
	old, obj := policytest.StatusWrite(t)
	if !strings.Contains(string(obj), `"allocatedMemoryBytes": 1073741824`) || !strings.Contains(poolStatusJSON, `"connected":true`) {
		t.Fatal("the bench objects no longer hold the fields the benchmarks change")
	}
	return []benchRequest{
		{"class-create", func() *admissionv1.AdmissionRequest {
			return createClass(strings.Replace(classJSON, `"name":"default"`, fmt.Sprintf(`"name":"default-%d"`, benchSeq.Add(1)), 1))
		}},
		{"pool-create", func() *admissionv1.AdmissionRequest {
			return createPool(strings.ReplaceAll(poolJSON, "node-a", fmt.Sprintf("node-n%d", benchSeq.Add(1))))
		}},
		{"pool-status-update-by-node", func() *admissionv1.AdmissionRequest {
			beat := time.Unix(1_800_000_000+benchSeq.Add(1), 0).UTC().Format(time.RFC3339)
			return updatePoolStatus(nodeA, oldStatus, strings.Replace(poolStatusJSON, `"connected":true`, `"connected":true,"lastHeartbeat":"`+beat+`"`, 1))
		}},
		{"pool-status-write", func() *admissionv1.AdmissionRequest {
			figure := fmt.Sprintf(`"allocatedMemoryBytes": %d`, benchSeq.Add(1))
			return updatePoolStatus(kubelet(policytest.StatusWriteNode), string(old), strings.Replace(string(obj), `"allocatedMemoryBytes": 1073741824`, figure, 1))
		}},
	}
}

// percentile is the p-th percentile (0..1) of sorted durations, in nanoseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*p)].Nanoseconds())
}

// BenchmarkValidate times the decision (the policy) per request kind, with 1000 pools in
// the inventory, a new request each time (made outside the timed call). Besides ns/op and
// allocations it reports the median and 99th percentile of the per-call times, and the
// process's CPU time per call (cpu-ns/op: every thread's, so the garbage collector's
// work during the call too; on a loaded machine wall time is not CPU time).
func BenchmarkValidate(b *testing.B) {
	v := newValidator(b, benchInventory(1000))
	ctx := context.Background()
	for _, bc := range benchRequests(b) {
		b.Run(bc.name, func(b *testing.B) {
			if d, err := v.Validate(ctx, bc.next()); err != nil || !d.Allowed {
				b.Fatalf("Validate = %+v, %v; want an allow", d, err)
			}
			times := make([]time.Duration, 0, b.N)
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req := bc.next()
				start, cpuStart := time.Now(), processCPU(b)
				if d, err := v.Validate(ctx, req); err != nil || !d.Allowed {
					b.Fatalf("Validate = %+v, %v; want an allow", d, err)
				}
				times = append(times, time.Since(start))
				cpu += processCPU(b) - cpuStart
			}
			b.StopTimer()
			slices.Sort(times)
			b.ReportMetric(percentile(times, 0.50), "p50-ns")
			b.ReportMetric(percentile(times, 0.99), "p99-ns")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkServeHTTP times what the webhook does with one review body per request kind:
// decoding the AdmissionReview, the decision, encoding the response, the metrics. No
// network: the body is handed to the Handler (made outside the timed call). cpu-ns/op is
// the process's CPU time per call, as in BenchmarkValidate.
func BenchmarkServeHTTP(b *testing.B) {
	h := newHandler(b, newValidator(b, benchInventory(1000)), prometheus.NewRegistry())
	for _, bc := range benchRequests(b) {
		b.Run(bc.name, func(b *testing.B) {
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				r := httptest.NewRequest(http.MethodPost, webhook.ValidatePath, bytes.NewReader(review(b, bc.next())))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				b.StartTimer()
				cpuStart := processCPU(b)
				h.ServeHTTP(w, r)
				cpu += processCPU(b) - cpuStart
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"allowed":true`) {
					b.Fatalf("HTTP %d: %s", w.Code, w.Body)
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// loopbackWindow is how long BenchmarkHandlerLoopback drives each rate.
const loopbackWindow = 3 * time.Second

// BenchmarkHandlerLoopback runs the real Handler behind an httptest TLS server on
// loopback and sends it the benchRequests in turn at a fixed rate for
// loopbackWindow, whatever b.N is (an open loop: a request is due at its slot whether
// or not earlier ones have returned). Latency is measured from the slot, so a server that
// falls behind shows it in p99; req/s is the rate achieved. The client keeps up to 64
// connections alive.
func BenchmarkHandlerLoopback(b *testing.B) {
	h := newHandler(b, newValidator(b, benchInventory(1000)), prometheus.NewRegistry())
	srv := httptest.NewTLSServer(h)
	defer srv.Close()
	transport := srv.Client().Transport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	transport.MaxConnsPerHost = 64
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	defer transport.CloseIdleConnections()

	requests := benchRequests(b)
	body := func(i int) []byte { return review(b, requests[i%len(requests)].next()) }
	send := func(body []byte) error {
		resp, err := client.Post(srv.URL+webhook.ValidatePath, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var rv admissionv1.AdmissionReview
		if err := json.Unmarshal(out, &rv); err != nil || rv.Response == nil || !rv.Response.Allowed {
			return fmt.Errorf("HTTP %d, response %.200s", resp.StatusCode, out)
		}
		return nil
	}
	for i := range requests { // warm the connection
		if err := send(body(i)); err != nil {
			b.Fatal(err)
		}
	}

	for _, rate := range []int{200, 1000} {
		b.Run(fmt.Sprintf("rate-%d", rate), func(b *testing.B) {
			n := rate * int(loopbackWindow/time.Second)
			interval := time.Second / time.Duration(rate)
			latencies := make([]time.Duration, n)
			var failed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := range n {
				due := start.Add(time.Duration(i) * interval)
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait) // pacing the open loop, not synchronisation
				}
				req := body(i)
				wg.Go(func() {
					if err := send(req); err != nil {
						failed.Add(1)
						b.Error(err)
					}
					latencies[i] = time.Since(due)
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(0, "ns/op") // the window is fixed; per-op time is p50/p99
			b.ReportMetric(percentile(latencies, 0.50), "p50-ns")
			b.ReportMetric(percentile(latencies, 0.99), "p99-ns")
			b.ReportMetric(float64(n-int(failed.Load()))/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(rate), "target-req/s")
		})
	}
}

// processCPU is this process's CPU time (user and system, every thread) so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
