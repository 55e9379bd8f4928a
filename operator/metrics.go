package operator

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Metrics of the controller, on the manager's /metrics next to controller-runtime's own
// (controller_runtime_reconcile_total and controller_runtime_reconcile_errors_total by
// controller are the reconcile counts and errors). Labels are bounded: class names are
// few and admin-chosen, phases and outcomes are fixed sets.
var (
	poolsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sandboxpool_pools",
		Help: "SandboxPools per class and phase (phase Unknown: no phase computed yet).",
	}, []string{"class", "phase"})

	poolsResizeDeferred = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sandboxpool_pools_resize_deferred",
		Help: "SandboxPools per class whose downscale the agent defers (status.resize.status Deferred: memory in use above the watermark of the new size).",
	}, []string{"class"})

	poolsHeartbeatStale = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sandboxpool_pools_agent_heartbeat_stale",
		Help: "SandboxPools per class whose agent Lease is expired or missing (PlaceholderAgentHealthy=False).",
	}, []string{"class"})

	fanoutDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sandboxpool_class_fanout_duration_seconds",
		Help:    "Time from the first reconcile that finds a class generation's pools out of sync (missing, outdated or to be deleted) to the first that finds them all in sync.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 16), // 10 ms … ~5.5 min
	})

	poolFinalizerReleases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxpool_pool_finalizer_releases_total",
		Help: "Pool finalizers the controller removed, by why: the mirror pod was gone, the node was gone, or the finalizer timeout forced it.",
	}, []string{"cause"})

	nodeGonePoolsDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandboxpool_node_gone_pools_deleted_total",
		Help: "Pools the controller deleted because their node had been gone for --node-gone-grace and their agent's Lease was not renewed.",
	})

	// The capacity figures of each class (its status.capacity, unrounded) and of each of its
	// pools (docs/operator.md, "Capacity"). The pool series carry the pool's zone, so
	// PromQL sums them per zone.
	classCapacityGauges = capacityGauges{
		cpu:       capacityGauge("sandboxpool_class_cpu_held_cores", "cpu the placeholder pods of the class's pools hold (status.capacity.cpu), in cores.", "class"),
		memory:    capacityGauge("sandboxpool_class_memory_held_bytes", "Memory the placeholder pods of the class's pools hold (status.capacity.memory), in bytes.", "class"),
		allocated: capacityGauge("sandboxpool_class_memory_allocated_bytes", "Memory the sandboxes of the class's pools use, as node-ctl reports it, in bytes.", "class"),
		free:      capacityGauge("sandboxpool_class_memory_free_bytes", "Memory node-ctl can still hand to new sandboxes on the class's Ready pools (allocatable less allocated, none below zero), in bytes.", "class"),
	}
	poolCapacityGauges = capacityGauges{
		cpu:       capacityGauge("sandboxpool_pool_cpu_held_cores", "cpu the pool's placeholder pods hold (status.capacity.cpu), in cores.", "class", "pool", "zone"),
		memory:    capacityGauge("sandboxpool_pool_memory_held_bytes", "Memory the pool's placeholder pods hold (status.capacity.memory), in bytes.", "class", "pool", "zone"),
		allocated: capacityGauge("sandboxpool_pool_memory_allocated_bytes", "Memory the pool's sandboxes use, as node-ctl reports it (status.poolInfo.allocatedMemoryBytes), in bytes.", "class", "pool", "zone"),
		free:      capacityGauge("sandboxpool_pool_memory_free_bytes", "Memory node-ctl can still hand to new sandboxes on the pool while it is Ready (allocatable less allocated, not below zero), in bytes.", "class", "pool", "zone"),
	}
)

// capacityGauges are the four capacity figures of one level (class or pool).
type capacityGauges struct {
	cpu, memory, allocated, free *prometheus.GaugeVec
}

func capacityGauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func (g capacityGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.cpu, g.memory, g.allocated, g.free}
}

func (g capacityGauges) set(f poolFigures, labels ...string) {
	g.cpu.WithLabelValues(labels...).Set(float64(f.cpuMilli) / 1000)
	g.memory.WithLabelValues(labels...).Set(float64(f.memory))
	g.allocated.WithLabelValues(labels...).Set(float64(f.allocated))
	g.free.WithLabelValues(labels...).Set(float64(f.free))
}

func (g capacityGauges) forget(labels prometheus.Labels) {
	for _, v := range []*prometheus.GaugeVec{g.cpu, g.memory, g.allocated, g.free} {
		v.DeletePartialMatch(labels)
	}
}

// phaseUnknown labels pools that have no phase yet.
const phaseUnknown = "Unknown"

var allPhases = []v1alpha1.SandboxPoolPhase{v1alpha1.PhasePending, v1alpha1.PhaseReady, v1alpha1.PhaseDegraded, v1alpha1.PhaseUnready, ""}

func init() {
	metrics.Registry.MustRegister(poolsByPhase, poolsResizeDeferred, poolsHeartbeatStale, fanoutDuration, poolFinalizerReleases, nodeGonePoolsDeleted)
	metrics.Registry.MustRegister(classCapacityGauges.collectors()...)
	metrics.Registry.MustRegister(poolCapacityGauges.collectors()...)
}

func phaseLabel(p v1alpha1.SandboxPoolPhase) string {
	if p == "" {
		return phaseUnknown
	}
	return string(p)
}

// setPoolsByPhase sets every phase of the class, zeros included, so a phase that empties
// shows 0 rather than its last value.
func setPoolsByPhase(class string, counts map[v1alpha1.SandboxPoolPhase]int) {
	for _, p := range allPhases {
		poolsByPhase.WithLabelValues(class, phaseLabel(p)).Set(float64(counts[p]))
	}
}

func forgetClassMetrics(class string) {
	poolsByPhase.DeletePartialMatch(prometheus.Labels{"class": class})
	poolsResizeDeferred.DeleteLabelValues(class)
	poolsHeartbeatStale.DeleteLabelValues(class)
	classCapacityGauges.forget(prometheus.Labels{"class": class})
	poolCapacityGauges.forget(prometheus.Labels{"class": class})
}

// poolCounts are the per-class figures the metrics show beside the phases.
type poolCounts struct {
	byPhase        map[v1alpha1.SandboxPoolPhase]int
	resizeDeferred int
	heartbeatStale int
}

// setCapacityMetrics sets the class's capacity series and those of its pools (by name), and
// removes the series of pools the class no longer has or whose zone changed: stale are the
// class's pool series of the pass before, pool name to zone.
func setCapacityMetrics(class string, total poolFigures, pools map[string]poolFigures, stale map[string]string) {
	classCapacityGauges.set(total, class)
	for pool, zone := range stale {
		if f, ok := pools[pool]; !ok || f.zone != zone {
			poolCapacityGauges.forget(prometheus.Labels{"class": class, "pool": pool, "zone": zone})
		}
	}
	for pool, f := range pools {
		poolCapacityGauges.set(f, class, pool, f.zone)
	}
}

func setPoolMetrics(class string, c poolCounts) {
	setPoolsByPhase(class, c.byPhase)
	poolsResizeDeferred.WithLabelValues(class).Set(float64(c.resizeDeferred))
	poolsHeartbeatStale.WithLabelValues(class).Set(float64(c.heartbeatStale))
}
