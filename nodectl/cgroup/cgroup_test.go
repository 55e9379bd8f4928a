package cgroup_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
)

const (
	mib         = 1 << 20
	hogDeadline = 30 * time.Second
)

// openReal opens a fresh real cgroup for t, skipping without root or controllers.
func openReal(t *testing.T) (*cgroup.Manager, string) {
	t.Helper()
	nodectltest.RequireCgroups(t)
	p := nodectltest.CgroupPath(t)
	m, err := cgroup.Open(p)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return m, p
}

func TestRealApplyWritesTheKernelFiles(t *testing.T) {
	m, p := openReal(t)
	t.Logf("cgroup %s, version %s", p, m.Version())
	if err := m.Apply(cgroup.Limits{CPUMilli: 500, MemoryBytes: 64 * mib}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got := nodectltest.ReadKernelLimits(t, p)
	want := nodectltest.KernelLimits{MemoryBytes: 64 * mib, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000}
	if m.Version() == cgroup.V1 {
		want.CPUShares = 512
	} else {
		want.CPUWeight = 20
	}
	if got != want {
		t.Errorf("kernel limits = %+v, want %+v", got, want)
	}

	// Opening an existing cgroup (node-ctl restarting) keeps its limits.
	again, err := cgroup.Open(p)
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	if got := nodectltest.ReadKernelLimits(t, p); got != want {
		t.Errorf("after reopening, kernel limits = %+v, want %+v", got, want)
	}
	s, err := again.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if s.MemoryLimitBytes != 64*mib {
		t.Errorf("Stats.MemoryLimitBytes = %d, want %d", s.MemoryLimitBytes, 64*mib)
	}
}

func TestRealUsageShrinkAndDelete(t *testing.T) {
	m, p := openReal(t)
	if err := m.Apply(cgroup.Limits{CPUMilli: 500, MemoryBytes: 64 * mib}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	before, err := m.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}

	hog := nodectltest.StartHog(t, p, 40)
	if err := hog.WaitAllocated(hogDeadline); err != nil {
		t.Fatal(err)
	}
	s, err := m.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	t.Logf("before the hog: %+v; with a 40 MiB hog: %+v", before, s)
	if s.MemoryWorkingSetBytes < 40*mib || s.MemoryUsageBytes < s.MemoryWorkingSetBytes {
		t.Errorf("with a 40 MiB hog, stats = %+v: want working set >= 40 MiB and usage >= working set", s)
	}
	pids, err := m.Processes()
	if err != nil || !slices.Contains(pids, hog.Pid) {
		t.Errorf("Processes = %v, %v; want the hog's pid %d", pids, err, hog.Pid)
	}

	// The kernel itself (v1: EBUSY after failing to reclaim anonymous memory without swap;
	// v2: our check, since the kernel would OOM-kill) refuses a limit below the usage.
	err = m.Apply(cgroup.Limits{CPUMilli: 250, MemoryBytes: 16 * mib})
	if !errors.Is(err, cgroup.ErrMemoryInUse) {
		t.Fatalf("shrinking to 16 MiB under a 40 MiB hog: %v, want ErrMemoryInUse", err)
	}
	t.Logf("refused as expected: %v", err)
	if got := nodectltest.ReadKernelLimits(t, p); got.MemoryBytes != 64*mib || got.CPUQuotaMicros != 50000 {
		t.Errorf("after the refused shrink, kernel limits = %+v: want the old 64 MiB and 500m", got)
	}

	if err := m.Delete(); err == nil {
		t.Fatalf("Delete succeeded with the hog inside")
	}
	hog.Release()
	if err := nodectltest.Poll(hogDeadline, m.Delete); err != nil {
		t.Fatalf("Delete after the hog left: %v", err)
	}
	for _, c := range []string{"cpu", "memory"} {
		if nodectltest.CgroupExists(t, p, c) {
			t.Errorf("%s cgroup %s still exists after Delete", c, p)
		}
	}
}

func TestRealLimitIsEnforced(t *testing.T) {
	m, p := openReal(t)
	if err := m.Apply(cgroup.Limits{CPUMilli: 500, MemoryBytes: 64 * mib}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	hog := nodectltest.StartHog(t, p, 128)
	if err := hog.WaitAllocated(hogDeadline); err == nil {
		t.Fatalf("a 128 MiB hog holds its memory in a 64 MiB cgroup")
	}
	if !hog.OOMKilled() {
		t.Fatalf("the 128 MiB hog was not OOM-killed")
	}
	s, err := m.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if s.OOMKills < 1 {
		t.Errorf("Stats.OOMKills = %d after an OOM kill", s.OOMKills)
	}
	if peak := nodectltest.PeakMemoryBytes(t, p); peak > 64*mib+nodectltest.OOMSlackBytes {
		t.Errorf("peak usage %d bytes exceeded the 64 MiB limit (plus the OOM slack)", peak)
	}
}

func TestOpenRefusesBadPaths(t *testing.T) {
	for _, p := range []string{"", "relative", "/", "/a/../b", "/sys/fs/cgroup/memory/x"} {
		if _, err := cgroup.Open(p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}
