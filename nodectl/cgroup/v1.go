package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// v1 drives the cpu and memory controllers of a cgroup v1 host (legacy or hybrid).
type v1 struct {
	cg cgroup1.Cgroup
}

// pather is implemented by every cgroup1 controller with a directory.
type pather interface{ Path(string) string }

// v1Hierarchy is the cpu and memory controllers only: node-ctl leaves every other
// controller (devices, pids, freezer, ...) to whoever else manages the node. Memory stats
// skip the swap and kernel-memory files, which not every kernel has.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("listing cgroup v1 controllers: %w", err)
	}
	roots := map[cgroup1.Name]string{}
	for _, s := range all {
		if p, ok := s.(pather); ok && (s.Name() == cgroup1.Cpu || s.Name() == cgroup1.Memory) {
			roots[s.Name()] = p.Path("/")
		}
	}
	for _, name := range []cgroup1.Name{cgroup1.Cpu, cgroup1.Memory} {
		root, ok := roots[name]
		if !ok {
			return nil, fmt.Errorf("cgroup v1 %s controller is not mounted", name)
		}
		if err := unix.Access(root, unix.W_OK); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s controller at %s is not writable: %w", name, root, err)
		}
	}
	// NewCpu and NewMemory take the directory holding the controllers' mounts.
	return []cgroup1.Subsystem{
		cgroup1.NewCpu(filepath.Dir(roots[cgroup1.Cpu])),
		cgroup1.NewMemory(filepath.Dir(roots[cgroup1.Memory]), cgroup1.IgnoreModules("memsw", "kmem", "kmem.tcp")),
	}, nil
}

func openV1(p string) (*v1, error) {
	// New creates the directories that are missing and, with empty resources, writes no
	// limit: opening an existing cgroup keeps its limits and processes.
	cg, err := cgroup1.New(cgroup1.StaticPath(p), &specs.LinuxResources{},
		cgroup1.WithHierarchy(v1Hierarchy),
		requireAll)
	if err != nil {
		return nil, err
	}
	return &v1{cg: cg}, nil
}

// requireAll makes a controller that is not active an error: node-ctl needs both.
func requireAll(cfg *cgroup1.InitConfig) error {
	cfg.InitCheck = func(s cgroup1.Subsystem, _ cgroup1.Path, err error) error {
		return fmt.Errorf("cgroup v1 %s controller: %w", s.Name(), err)
	}
	return nil
}

func (c *v1) apply(l Limits) error {
	limit := l.MemoryBytes
	if err := c.cg.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("setting memory limit to %d bytes: %w: %w", limit, ErrMemoryInUse, err)
		}
		return fmt.Errorf("setting memory limit to %d bytes: %w", limit, err)
	}
	shares, quota, period := cpuShares(l.CPUMilli), cpuQuota(l.CPUMilli), uint64(CFSPeriodMicros)
	if err := c.cg.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares, Quota: &quota, Period: &period}}); err != nil {
		return fmt.Errorf("setting cpu quota %d/%d us and shares %d: %w", quota, period, shares, err)
	}
	return nil
}

func (c *v1) stats() (Stats, error) {
	m, err := c.cg.Stat()
	if err != nil {
		return Stats{}, err
	}
	if m.Memory == nil || m.Memory.Usage == nil {
		return Stats{}, errors.New("no memory stats")
	}
	s := Stats{
		MemoryLimitBytes:      memoryLimit(m.Memory.Usage.Limit),
		MemoryUsageBytes:      int64(m.Memory.Usage.Usage),
		MemoryWorkingSetBytes: workingSet(m.Memory.Usage.Usage, m.Memory.TotalInactiveFile),
	}
	if m.MemoryOomControl != nil {
		s.OOMKills = m.MemoryOomControl.OomKill
	}
	return s, nil
}

func (c *v1) addProcess(pid int) error {
	return c.cg.AddProc(uint64(pid))
}

func (c *v1) processes() ([]int, error) {
	procs, err := c.cg.Processes(cgroup1.Memory, true)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, p.Pid)
	}
	return pids, nil
}

func (c *v1) delete() error {
	return c.cg.Delete()
}
