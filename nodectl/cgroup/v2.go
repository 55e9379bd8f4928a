package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// unifiedMountpoint is where a unified (cgroup v2 only) host mounts the hierarchy.
const unifiedMountpoint = "/sys/fs/cgroup"

// v2 drives a cgroup on a unified (cgroup v2 only) host.
type v2 struct {
	m   *cgroup2.Manager
	dir string // the cgroup's directory under unifiedMountpoint
}

// v2Available checks that the root offers the cpu and memory controllers and is writable.
func v2Available() error {
	data, err := os.ReadFile(filepath.Join(unifiedMountpoint, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("reading cgroup v2 controllers: %w", err)
	}
	have := strings.Fields(string(data))
	for _, c := range []string{"cpu", "memory"} {
		if !slices.Contains(have, c) {
			return fmt.Errorf("cgroup v2 %s controller is not available at %s", c, unifiedMountpoint)
		}
	}
	if err := unix.Access(unifiedMountpoint, unix.W_OK); err != nil {
		return fmt.Errorf("cgroup v2 hierarchy at %s is not writable: %w", unifiedMountpoint, err)
	}
	return nil
}

func openV2(p string) (*v2, error) {
	if err := v2Available(); err != nil {
		return nil, err
	}
	// Non-nil, empty CPU and Memory enable the two controllers down to the cgroup
	// (subtree_control of every ancestor) and write no limit.
	m, err := cgroup2.NewManager(unifiedMountpoint, p, &cgroup2.Resources{
		CPU:    &cgroup2.CPU{},
		Memory: &cgroup2.Memory{},
	})
	if err != nil {
		return nil, err
	}
	return &v2{m: m, dir: filepath.Join(unifiedMountpoint, p)}, nil
}

func (c *v2) apply(l Limits) error {
	// Unlike v1, a v2 kernel does not refuse memory.max below usage: it reclaims and then
	// OOM-kills. Refuse here instead, so a shrink never kills a sandbox. (A sandbox that
	// grows between this check and the write can still be killed; the agent's watermark
	// rule keeps a margin for that.)
	s, err := c.stats()
	if err != nil {
		return err
	}
	if s.MemoryWorkingSetBytes > l.MemoryBytes {
		return fmt.Errorf("setting memory limit to %d bytes: %w (working set %d bytes)",
			l.MemoryBytes, ErrMemoryInUse, s.MemoryWorkingSetBytes)
	}
	limit := l.MemoryBytes
	if err := c.m.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Max: &limit}}); err != nil {
		return fmt.Errorf("setting memory.max to %d bytes: %w", limit, err)
	}
	quota, period := cpuQuota(l.CPUMilli), uint64(CFSPeriodMicros)
	weight := cpuWeight(cpuShares(l.CPUMilli))
	if err := c.m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{
		Weight: &weight,
		Max:    cgroup2.NewCPUMax(&quota, &period),
	}}); err != nil {
		return fmt.Errorf("setting cpu.max %d %d and cpu.weight %d: %w", quota, period, weight, err)
	}
	return nil
}

func (c *v2) stats() (Stats, error) {
	// cgroup2's Stat reads a missing file as zero; a deleted cgroup must be an error.
	if _, err := os.Stat(c.dir); err != nil {
		return Stats{}, err
	}
	m, err := c.m.Stat()
	if err != nil {
		return Stats{}, err
	}
	if m.Memory == nil {
		return Stats{}, errors.New("no memory stats")
	}
	s := Stats{
		MemoryLimitBytes:      memoryLimit(m.Memory.UsageLimit),
		MemoryUsageBytes:      int64(m.Memory.Usage),
		MemoryWorkingSetBytes: workingSet(m.Memory.Usage, m.Memory.InactiveFile),
	}
	if m.MemoryEvents != nil {
		s.OOMKills = m.MemoryEvents.OomKill
	}
	return s, nil
}

func (c *v2) addProcess(pid int) error {
	return c.m.AddProc(uint64(pid))
}

func (c *v2) processes() ([]int, error) {
	procs, err := c.m.Procs(true)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, int(p))
	}
	return pids, nil
}

func (c *v2) delete() error {
	return c.m.Delete()
}
