package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the agent on its /metrics, beside controller-runtime's reconcile metrics
// (controller "placeholder-agent"). No label is unbounded.
var (
	statusWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandboxpool_agent_status_writes_total",
		Help: "Status applies by the agent (only when a field changed).",
	})
	leaseRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxpool_agent_lease_renewals_total",
		Help: "Lease renewals, by result (ok, error).",
	}, []string{"result"})
	manifestWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandboxpool_agent_manifest_writes_total",
		Help: "Static pod manifests written: first writes, resizes and self-heals.",
	})
	manifestEvents = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandboxpool_agent_manifest_events_total",
		Help: "File system events on the agent's manifests.",
	})
	nodeCtlApplies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxpool_agent_nodectl_applies_total",
		Help: "node-ctl config reloads, by result (applied, rejected, unreachable).",
	}, []string{"result"})
	nodeCtlUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sandboxpool_agent_nodectl_up",
		Help: "1 when node-ctl answered the last poll.",
	})
	shimCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxpool_agent_shim_calls_total",
		Help: "Calls from the placeholder shim, by method.",
	}, []string{"method"})
)

func init() {
	metrics.Registry.MustRegister(statusWrites, leaseRenewals, manifestWrites, manifestEvents, nodeCtlApplies, nodeCtlUp, shimCalls)
	// Every result exists from the start, so the first error is visible to rate().
	for _, r := range []string{"ok", "error"} {
		leaseRenewals.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "rejected", "unreachable"} {
		nodeCtlApplies.WithLabelValues(r)
	}
}
