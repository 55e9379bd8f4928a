package operator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// capacityPool is a pool whose agent reported a lock of cpu/memory and node-ctl's figures;
// allocatable < 0 leaves poolInfo out.
func capacityPool(name string, phase v1alpha1.SandboxPoolPhase, zone, cpu, memory string, allocatable, allocated int64) *v1alpha1.SandboxPool {
	p := &v1alpha1.SandboxPool{}
	p.Name = name
	p.Status.Phase = phase
	p.Status.Capacity = &v1alpha1.PoolCapacity{CPU: ptr.To(resource.MustParse(cpu)), Memory: ptr.To(resource.MustParse(memory))}
	if allocatable >= 0 {
		p.Status.PoolInfo = &v1alpha1.PoolInfo{Zone: zone, AllocatableMemoryBytes: ptr.To(allocatable), AllocatedMemoryBytes: ptr.To(allocated)}
	}
	return p
}

// figuresText renders capacity figures as "cpu/memory/allocated/free".
func figuresText(f v1alpha1.CapacityFigures) string {
	return fmt.Sprintf("%s/%s/%s/%s", f.CPU, f.Memory, f.AllocatedMemory, f.FreeMemory)
}

// TestClassCapacity: the class sums what its pools hold, use and have free — free only on
// Ready pools and never below zero per pool — in all and per zone, as the quantities the
// status shows (allocated rounded up, free rounded down).
func TestClassCapacity(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name  string
		pools []*v1alpha1.SandboxPool
		total string
		zones []string
	}{
		{"no pools", nil, "0/0/0/0", nil},
		{"one Ready pool", []*v1alpha1.SandboxPool{
			capacityPool("a", v1alpha1.PhaseReady, "", "500m", "128Mi", 128*mi, 13_000_000),
		}, "500m/128Mi/13Mi/115Mi", nil},
		{"Ready, Degraded and not reported", []*v1alpha1.SandboxPool{
			capacityPool("a", v1alpha1.PhaseReady, "z1", "2", "4Gi", 4096*mi, 1024*mi),
			capacityPool("b", v1alpha1.PhaseDegraded, "z1", "2", "4Gi", 4096*mi, 512*mi),
			{Status: v1alpha1.SandboxPoolStatus{Phase: v1alpha1.PhasePending}},
		}, "4/8Gi/1536Mi/3Gi", []string{"z1: 2 pools 4/8Gi/1536Mi/3Gi"}},
		{"usage above allocatable frees nothing and takes nothing from the others", []*v1alpha1.SandboxPool{
			capacityPool("a", v1alpha1.PhaseReady, "z2", "1", "1Gi", 1024*mi, 1100*mi),
			capacityPool("b", v1alpha1.PhaseReady, "z1", "1", "1Gi", 1024*mi, 24*mi),
			capacityPool("c", v1alpha1.PhaseReady, "", "1", "1Gi", -1, 0),
		}, "3/3Gi/1124Mi/1000Mi", []string{"z1: 1 pools 1/1Gi/24Mi/1000Mi", "z2: 1 pools 1/1Gi/1100Mi/0"}},
		{"decimal quotas stay decimal", []*v1alpha1.SandboxPool{
			capacityPool("a", v1alpha1.PhaseReady, "", "250m", "8G", 8e9, 0),
			capacityPool("b", v1alpha1.PhaseReady, "", "250m", "8G", 8e9, 0),
		}, "500m/16G/0/15258Mi", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fs []poolFigures
			for _, p := range tc.pools {
				fs = append(fs, figuresOf(p))
			}
			c, _ := classCapacity(fs)
			if got := figuresText(c.CapacityFigures); got != tc.total {
				t.Errorf("total %s, want %s", got, tc.total)
			}
			var zones []string
			for _, z := range c.Zones {
				zones = append(zones, fmt.Sprintf("%s: %d pools %s", z.Zone, z.Pools, figuresText(z.CapacityFigures)))
			}
			if strings.Join(zones, "; ") != strings.Join(tc.zones, "; ") {
				t.Errorf("zones %q, want %q", zones, tc.zones)
			}
		})
	}
}

// TestClassCapacityStatusIsStable: the status the class computes serialises exactly as the
// API server gives it back, so a pass over unchanged pools finds nothing to write.
func TestClassCapacityStatusIsStable(t *testing.T) {
	c, _ := classCapacity([]poolFigures{
		figuresOf(capacityPool("a", v1alpha1.PhaseReady, "z1", "1500m", "3Gi", 3<<30, 12_345_678)),
		figuresOf(capacityPool("b", v1alpha1.PhaseReady, "z2", "250m", "8G", 8e9, 0)),
	})
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.ClassCapacity
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(&back)
	if string(again) != string(b) {
		t.Errorf("read back as %s, computed %s", again, b)
	}
}

// TestPoolCapacityChangeMattersToClass: a pool update that changes what it holds, uses or
// has free reaches its class; one that changes nothing it counts does not.
func TestPoolCapacityChangeMattersToClass(t *testing.T) {
	base := capacityPool("a", v1alpha1.PhaseReady, "z1", "500m", "128Mi", 128<<20, 0)
	for _, tc := range []struct {
		name    string
		change  func(*v1alpha1.SandboxPool)
		matters bool
	}{
		{"heartbeat only", func(p *v1alpha1.SandboxPool) {
			p.Status.NodeCtl = &v1alpha1.NodeCtlStatus{Connected: ptr.To(true)}
		}, false},
		{"memory in use", func(p *v1alpha1.SandboxPool) { p.Status.PoolInfo.AllocatedMemoryBytes = ptr.To[int64](64 << 20) }, true},
		{"allocatable", func(p *v1alpha1.SandboxPool) { p.Status.PoolInfo.AllocatableMemoryBytes = ptr.To[int64](192 << 20) }, true},
		{"lock grown", func(p *v1alpha1.SandboxPool) { p.Status.Capacity.Memory = ptr.To(resource.MustParse("192Mi")) }, true},
		{"lock cpu", func(p *v1alpha1.SandboxPool) { p.Status.Capacity.CPU = ptr.To(resource.MustParse("700m")) }, true},
		{"same lock written otherwise", func(p *v1alpha1.SandboxPool) { p.Status.Capacity.CPU = ptr.To(resource.MustParse("0.5")) }, false},
		{"zone", func(p *v1alpha1.SandboxPool) { p.Status.PoolInfo.Zone = "z2" }, true},
	} {
		n := base.DeepCopy()
		tc.change(n)
		if got := poolChangeMattersToClass(base, n); got != tc.matters {
			t.Errorf("%s: matters %v, want %v", tc.name, got, tc.matters)
		}
	}
}

// TestCapacityMetrics: the class and pool series follow the figures; a pool that leaves the
// class or changes zone leaves no series behind, and a deleted class none at all.
func TestCapacityMetrics(t *testing.T) {
	const class = "metrics-test"
	var s classStates
	pass := func(pools ...*v1alpha1.SandboxPool) {
		byPool := map[string]poolFigures{}
		var fs []poolFigures
		for _, p := range pools {
			byPool[p.Name] = figuresOf(p)
			fs = append(fs, byPool[p.Name])
		}
		_, total := classCapacity(fs)
		setCapacityMetrics(class, total, byPool, s.swapPoolSeries(class, byPool))
	}
	series := func(g *prometheus.GaugeVec) int {
		ch := make(chan prometheus.Metric, 100)
		g.Collect(ch)
		close(ch)
		return len(ch)
	}
	value := func(g *prometheus.GaugeVec, labels ...string) float64 {
		var m dto.Metric
		if err := g.WithLabelValues(labels...).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}

	pass(capacityPool("a", v1alpha1.PhaseReady, "z1", "500m", "128Mi", 128<<20, 28<<20),
		capacityPool("b", v1alpha1.PhaseReady, "z1", "1", "1Gi", 1<<30, 0))
	if got := value(classCapacityGauges.cpu, class); got != 1.5 {
		t.Errorf("class cpu %v, want 1.5", got)
	}
	if got := value(classCapacityGauges.free, class); got != float64(100<<20+1<<30) {
		t.Errorf("class free %v", got)
	}
	if got := value(poolCapacityGauges.allocated, class, "a", "z1"); got != float64(28<<20) {
		t.Errorf("pool a allocated %v", got)
	}
	if n := series(poolCapacityGauges.memory); n != 2 {
		t.Errorf("%d pool memory series, want 2", n)
	}

	// b is gone, a moved to z2.
	pass(capacityPool("a", v1alpha1.PhaseReady, "z2", "500m", "128Mi", 128<<20, 28<<20))
	if n := series(poolCapacityGauges.memory); n != 1 {
		t.Errorf("%d pool memory series after b left and a moved, want 1", n)
	}
	if got := value(poolCapacityGauges.memory, class, "a", "z2"); got != float64(128<<20) {
		t.Errorf("pool a memory in z2 %v", got)
	}

	forgetClassMetrics(class)
	for _, g := range []capacityGauges{classCapacityGauges, poolCapacityGauges} {
		if n := series(g.cpu) + series(g.memory) + series(g.allocated) + series(g.free); n != 0 {
			t.Errorf("%d capacity series left after the class was forgotten", n)
		}
	}
}

// BenchmarkClassCapacity: what summing a class's pools costs each class pass, by pool count
// (docs/benchmarks.md, "Class capacity").
func BenchmarkClassCapacity(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		pools := make([]*v1alpha1.SandboxPool, n)
		for i := range pools {
			pools[i] = capacityPool(fmt.Sprintf("p%d", i), v1alpha1.PhaseReady, fmt.Sprintf("zone-%d", i%3), "4", "16Gi", 16<<30, int64(i)<<20)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				fs := make([]poolFigures, 0, n)
				for _, p := range pools {
					fs = append(fs, figuresOf(p))
				}
				classCapacity(fs)
			}
		})
	}
}
