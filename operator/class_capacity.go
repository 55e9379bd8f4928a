package operator

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// poolFigures are the capacity figures of one pool, from its status (docs/operator.md,
// "Capacity"): what its placeholder pods hold (status.capacity, the agent's report of the
// pods kubelet admitted), what its sandboxes use and what node-ctl can still hand out
// (status.poolInfo). The struct is comparable: a pool update matters to its class's
// capacity exactly when its figures differ.
type poolFigures struct {
	zone string
	// cpuMilli and memory are the held cpu (millicores) and memory (bytes).
	cpuMilli, memory int64
	// allocated is the memory in use (bytes); free what node-ctl can still hand out (bytes),
	// counted only while the pool is Ready.
	allocated, free int64
}

// figuresOf reads a pool's capacity figures from its status. Absent figures count as zero:
// a pool whose agent has not reported holds nothing the class can count on.
func figuresOf(p *v1alpha1.SandboxPool) poolFigures {
	var f poolFigures
	if c := p.Status.Capacity; c != nil {
		if c.CPU != nil {
			f.cpuMilli = c.CPU.MilliValue()
		}
		if c.Memory != nil {
			f.memory = c.Memory.Value()
		}
	}
	if info := p.Status.PoolInfo; info != nil {
		f.zone = info.Zone
		f.allocated = ptr.Deref(info.AllocatedMemoryBytes, 0)
		if p.Status.Phase == v1alpha1.PhaseReady {
			f.free = max(0, ptr.Deref(info.AllocatableMemoryBytes, 0)-f.allocated)
		}
	}
	return f
}

// add sums another pool's figures into f (the zone is left alone).
func (f *poolFigures) add(o poolFigures) {
	f.cpuMilli += o.cpuMilli
	f.memory += o.memory
	f.allocated += o.allocated
	f.free += o.free
}

// quantities renders summed figures as the status shows them: cpu in cores or millicores,
// held memory as memoryQuantity, what is in use rounded up and what is free rounded down
// to a mebibyte.
func (f poolFigures) quantities() v1alpha1.CapacityFigures {
	return v1alpha1.CapacityFigures{
		CPU:             resource.NewMilliQuantity(f.cpuMilli, resource.DecimalSI),
		Memory:          memoryQuantity(f.memory),
		AllocatedMemory: ptr.To(v1alpha1.MebibytesUp(f.allocated)),
		FreeMemory:      ptr.To(v1alpha1.MebibytesDown(f.free)),
	}
}

// classCapacity sums the figures of a class's pools into its status.capacity: in all, and
// per zone for the pools whose node-ctl reports one (zones in name order, so the status
// does not change with the order of the pools). total is the sum, unrounded.
func classCapacity(pools []poolFigures) (c *v1alpha1.ClassCapacity, total poolFigures) {
	zones := map[string]*poolFigures{}
	counts := map[string]int32{}
	for _, f := range pools {
		total.add(f)
		if f.zone == "" {
			continue
		}
		if zones[f.zone] == nil {
			zones[f.zone] = &poolFigures{}
		}
		zones[f.zone].add(f)
		counts[f.zone]++
	}
	c = &v1alpha1.ClassCapacity{CapacityFigures: total.quantities()}
	for zone, f := range zones {
		c.Zones = append(c.Zones, v1alpha1.ZoneCapacity{Zone: zone, Pools: counts[zone], CapacityFigures: f.quantities()})
	}
	slices.SortFunc(c.Zones, func(a, b v1alpha1.ZoneCapacity) int { return strings.Compare(a.Zone, b.Zone) })
	return c, total
}

// memoryQuantity is n bytes in binary units when they are whole mebibytes ("768Mi", "3Gi"),
// else in decimal ones: quotas written as "8G" sum to "16G", not "15625000Ki".
func memoryQuantity(n int64) *resource.Quantity {
	if n%(1<<20) == 0 {
		return resource.NewQuantity(n, resource.BinarySI)
	}
	return resource.NewQuantity(n, resource.DecimalSI)
}
