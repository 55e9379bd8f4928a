package scale

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/agentcube/sandboxpool/tests/framework"
)

// counters are what one reading of the control plane's own counters says: the API server's
// requests by "VERB resource[/subresource]" (apiserver_request_total, every code; long
// WATCH requests counted once), its watch events delivered by kind
// (apiserver_watch_events_total: one per event per watcher), etcd's WAL bytes written
// (etcd_disk_wal_write_bytes_total), and each measured process's CPU time (/proc).
type counters struct {
	at        time.Time
	requests  map[string]float64
	watch     map[string]float64
	etcdBytes float64
	cpu       map[string]time.Duration
}

// cost is the difference of two readings, less what the measurement itself asked (the
// observer's requests and watch events).
type cost struct {
	took      time.Duration
	requests  map[string]float64
	watch     map[string]float64
	etcdBytes float64
	cpu       map[string]time.Duration
}

func readCounters(t testing.TB, ctx context.Context, cs kubernetes.Interface, etcdURL string, pids map[string]int) counters {
	t.Helper()
	c := counters{at: time.Now(), requests: map[string]float64{}, watch: map[string]float64{}, cpu: map[string]time.Duration{}}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	eachSample(string(raw), func(name string, l map[string]string, v float64) {
		switch name {
		case "apiserver_request_total":
			if res := l["resource"]; res != "" { // non-resource requests (/metrics) left out
				if l["subresource"] != "" {
					res += "/" + l["subresource"]
				}
				c.requests[l["verb"]+" "+res] += v
			}
		case "apiserver_watch_events_total":
			c.watch[l["kind"]] += v
		}
	})
	resp, err := http.Get(strings.TrimSuffix(etcdURL, "/") + "/metrics")
	if err != nil {
		t.Fatalf("reading etcd's metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("reading etcd's metrics: %v", err)
	}
	eachSample(string(body), func(name string, _ map[string]string, v float64) {
		if name == "etcd_disk_wal_write_bytes_total" {
			c.etcdBytes += v
		}
	})
	for k, pid := range pids {
		u, err := framework.ProcUsage(pid)
		if err != nil {
			t.Fatalf("CPU of %s (%d): %v", k, pid, err)
		}
		c.cpu[k] = u.CPU
	}
	return c
}

// eachSample calls fn for every sample of a Prometheus text exposition.
func eachSample(text string, fn func(name string, labels map[string]string, v float64)) {
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, rest, hasLabels := strings.Cut(line[:i], "{")
		labels := map[string]string{}
		if hasLabels {
			labels = promLabels(strings.TrimSuffix(rest, "}"))
		}
		fn(name, labels, v)
	}
}

// promLabels parses `a="x",b="y"`.
func promLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		v, rest, _ := strings.Cut(rest, `"`)
		out[k] = v
		s = strings.TrimPrefix(rest, ",")
	}
	return out
}

// since is the cost between b and c, less own (the observer's share over the same time).
func (c counters) since(b counters, own ownShare) cost {
	out := cost{took: c.at.Sub(b.at), requests: map[string]float64{}, watch: map[string]float64{}, cpu: map[string]time.Duration{},
		etcdBytes: c.etcdBytes - b.etcdBytes}
	for k, v := range c.requests {
		if d := v - b.requests[k] - own.requests[k]; d > 0.5 {
			out.requests[k] = d
		}
	}
	for k, v := range c.watch {
		if d := v - b.watch[k] - own.watch[k]; d > 0.5 {
			out.watch[k] = d
		}
	}
	for k, v := range c.cpu {
		if before, ok := b.cpu[k]; ok {
			out.cpu[k] = v - before
		}
	}
	return out
}

// total is the sum of the requests, or of those whose "VERB resource" key keep says.
func total(m map[string]float64, keep func(string) bool) float64 {
	s := 0.0
	for k, v := range m {
		if keep == nil || keep(k) {
			s += v
		}
	}
	return s
}

// renewal is the key of the agents' Lease renewals, the steady state's one request.
const renewal = "PUT leases"

// beyond is c less rate (a steady state's cost per second) over c's duration: the phase's
// own cost beyond what the cluster pays at rest anyway.
func (c cost) beyond(rate cost) cost {
	if rate.took <= 0 {
		return c
	}
	f := c.took.Seconds() / rate.took.Seconds()
	out := cost{took: c.took, requests: map[string]float64{}, watch: map[string]float64{}, cpu: map[string]time.Duration{},
		etcdBytes: max(0, c.etcdBytes-rate.etcdBytes*f)}
	for k, v := range c.requests {
		if d := v - rate.requests[k]*f; d > 0.5 {
			out.requests[k] = d
		}
	}
	for k, v := range c.watch {
		if d := v - rate.watch[k]*f; d > 0.5 {
			out.watch[k] = d
		}
	}
	for k, v := range c.cpu {
		out.cpu[k] = max(0, v-time.Duration(float64(rate.cpu[k])*f))
	}
	return out
}

// byCount lists m's keys, largest value first.
func byCount(m map[string]float64) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}

// ownShare is what the measurement itself asked of the API server: requests by "VERB
// resource" and watch events received by kind.
type ownShare struct {
	requests map[string]float64
	watch    map[string]float64
}

// ownCounter counts the observer's requests and watch events, for cost.since.
type ownCounter struct {
	mu  sync.Mutex // guards own
	own ownShare
}

func newOwnCounter() *ownCounter {
	return &ownCounter{own: ownShare{requests: map[string]float64{}, watch: map[string]float64{}}}
}

func (o *ownCounter) request(verb, resource string) {
	o.mu.Lock()
	o.own.requests[verb+" "+resource]++
	o.mu.Unlock()
}

func (o *ownCounter) event(kind string) {
	o.mu.Lock()
	o.own.watch[kind]++
	o.mu.Unlock()
}

// snapshot is a copy of the counts so far.
func (o *ownCounter) snapshot() ownShare {
	o.mu.Lock()
	defer o.mu.Unlock()
	return ownShare{requests: maps.Clone(o.own.requests), watch: maps.Clone(o.own.watch)}
}

// minus is o less b, per key.
func (o ownShare) minus(b ownShare) ownShare {
	out := ownShare{requests: map[string]float64{}, watch: map[string]float64{}}
	for k, v := range o.requests {
		out.requests[k] = v - b.requests[k]
	}
	for k, v := range o.watch {
		out.watch[k] = v - b.watch[k]
	}
	return out
}

// perNode formats x / n with a precision that suits it.
func perNode(x float64, n int) string {
	v := x / float64(n)
	switch {
	case v == 0:
		return "0"
	case v < 0.1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
