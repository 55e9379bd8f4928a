package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestCapacity: `kubectl get spc,sp` show what the suite's class and its pool hold, use and
// have free, as quantities, from the pool's status (the agent's report of the placeholder
// pods kubelet admitted and of node-ctl's memory in use) and the class's (the controller's
// sums, per zone too); a resize moves the held cpu and memory, and a process that allocates
// memory in node-ctl's cgroup moves the memory in use and the free memory.
func TestCapacity(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })

	waitCapacity(t, "the base size", func(c capacityView) bool {
		return c.poolCPU == baseCPU && c.poolMemory == baseMemory && c.classCPU == baseCPU && c.classMemory == baseMemory &&
			c.zone == zone && c.zonePools == 1 && c.free > 0
	})
	columns(t, s.Kubectl, baseCPU, baseMemory)

	up := wrappers.Resources("700m", "192Mi")
	setClassResources(t, up)
	waitSynced(t, "700m", "192Mi", 2*time.Minute)
	before := waitCapacity(t, "the resized size", func(c capacityView) bool {
		return c.poolCPU == "700m" && c.poolMemory == "192Mi" && c.classCPU == "700m" && c.classMemory == "192Mi"
	})
	columns(t, s.Kubectl, "700m", "192Mi")

	// 96 MiB in use in node-ctl's cgroup: the agent reports memory in use once it moved by
	// 16 MiB or more (so what it reported before may be up to 16 MiB off), the class follows.
	hog := nodectltest.StartHog(t, s.NodeCtlCgroup, 96)
	if err := hog.WaitAllocated(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	using := waitCapacity(t, "96 MiB more in use, that much less free", func(c capacityView) bool {
		return c.poolAllocated >= before.poolAllocated+80<<20 && c.classAllocated >= before.classAllocated+80<<20 &&
			c.free <= before.free-79<<20 && c.free >= 0
	})
	t.Logf("in use: pool %s, class %s; free %s (before: %s in use, %s free)",
		quantity(using.poolAllocated), quantity(using.classAllocated), quantity(using.free),
		quantity(before.classAllocated), quantity(before.free))
	out, err := s.Kubectl(context.Background(), "get", "spc,sp")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get spc,sp with the memory in use:\n%s", out)
	// The hog's memory may still be moving into its working set: kubectl shows at least
	// what the class's status showed before, and no more free.
	row := columnsOf(t, out, "sandboxpoolclass.sandboxpool.agentcube.volcano.sh/"+className)
	shownAllocated, err1 := resource.ParseQuantity(row["ALLOCATED"])
	shownFree, err2 := resource.ParseQuantity(row["FREE"])
	if err1 != nil || err2 != nil || shownAllocated.Value() < using.classAllocated || shownFree.Value() > using.free {
		t.Errorf("kubectl get spc shows %s allocated and %s free; the class's status showed %s and %s",
			row["ALLOCATED"], row["FREE"], quantity(using.classAllocated), quantity(using.free))
	}
	hog.Release()
	waitCapacity(t, "the memory freed again", func(c capacityView) bool {
		return c.classAllocated < using.classAllocated-64<<20
	})
}

// capacityView is what the suite's pool and class report of their capacity.
type capacityView struct {
	poolCPU, poolMemory, classCPU, classMemory string
	poolAllocated, classAllocated, free        int64
	zone                                       string
	zonePools                                  int32
}

// waitCapacity waits until the pool's and the class's capacity satisfy cond, and returns it.
func waitCapacity(t *testing.T, what string, cond func(capacityView) bool) capacityView {
	t.Helper()
	var c capacityView
	eventually(t, "capacity: "+what, time.Minute, func() (bool, string) {
		c = capacityView{}
		p := getPool(t)
		var class v1alpha1.SandboxPoolClass
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: className}, &class); err != nil {
			return false, err.Error()
		}
		if p == nil || p.Status.Capacity == nil || class.Status.Capacity == nil {
			return false, fmt.Sprintf("pool %v, class %+v; %s", p != nil, class.Status.Capacity, describe(p))
		}
		pc, cc := p.Status.Capacity, class.Status.Capacity
		c.poolCPU, c.poolMemory = pc.CPU.String(), pc.Memory.String()
		c.classCPU, c.classMemory = cc.CPU.String(), cc.Memory.String()
		if pc.AllocatedMemory != nil {
			c.poolAllocated = pc.AllocatedMemory.Value()
		}
		c.classAllocated, c.free = cc.AllocatedMemory.Value(), cc.FreeMemory.Value()
		if len(cc.Zones) == 1 {
			c.zone, c.zonePools = cc.Zones[0].Zone, cc.Zones[0].Pools
		}
		return cond(c), fmt.Sprintf("%+v", c)
	})
	return c
}

// columns checks that kubectl get spc,sp show the held cpu and memory as quantities.
func columns(t *testing.T, kubectl func(context.Context, ...string) (string, error), cpu, memory string) {
	t.Helper()
	out, err := kubectl(context.Background(), "get", "spc,sp")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get spc,sp:\n%s", out)
	class := columnsOf(t, out, "sandboxpoolclass.sandboxpool.agentcube.volcano.sh/"+className)
	pool := columnsOf(t, out, "sandboxpool.sandboxpool.agentcube.volcano.sh/"+poolName)
	if class["CPU"] != cpu || class["MEMORY"] != memory || class["TOTAL"] != "1" || class["READY"] != "1" {
		t.Errorf("kubectl get spc: %v, want cpu %s, memory %s, 1 pool Ready", class, cpu, memory)
	}
	if pool["CPU"] != cpu || pool["MEMORY"] != memory || pool["PHASE"] != "Ready" || pool["ZONE"] != zone {
		t.Errorf("kubectl get sp: %v, want cpu %s, memory %s, Ready in %s", pool, cpu, memory, zone)
	}
	for _, q := range []string{class["ALLOCATED"], class["FREE"], pool["ALLOCATED"]} {
		if _, err := resource.ParseQuantity(q); err != nil {
			t.Errorf("not a quantity: %q (%v)", q, err)
		}
	}
}

// columnsOf finds the row of name in kubectl's output of several kinds and returns its
// columns by header. kubectl aligns the columns and leaves an absent value blank, so a
// value is what lies below its header.
func columnsOf(t *testing.T, out, name string) map[string]string {
	t.Helper()
	var header string
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "NAME ") {
			header = line
			continue
		}
		if f := strings.Fields(line); len(f) == 0 || f[0] != name {
			continue
		}
		row := map[string]string{}
		for _, loc := range regexp.MustCompile(`\S+`).FindAllStringIndex(header, -1) {
			end := len(line)
			if next := strings.IndexFunc(header[loc[1]:], func(r rune) bool { return r != ' ' }); next >= 0 {
				end = min(len(line), loc[1]+next)
			}
			if loc[0] < len(line) {
				row[header[loc[0]:loc[1]]] = strings.TrimSpace(line[loc[0]:end])
			}
		}
		return row
	}
	t.Fatalf("no row %s in:\n%s", name, out)
	return nil
}

// quantity renders bytes as the status does (whole mebibytes).
func quantity(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
