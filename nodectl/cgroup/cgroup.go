// Package cgroup is the reference node-ctl's view of the node-level cgroup a pool is
// enforced in: create it, apply cpu and memory limits, read memory usage back, move
// processes in, delete it. It drives github.com/containerd/cgroups/v3 and branches on the
// host's mode: cgroup v1 (legacy or hybrid hosts, whose cpu and memory controllers are v1)
// or cgroup v2 (unified hosts).
package cgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/containerd/cgroups/v3"
)

// CFSPeriodMicros is the CFS period node-ctl sets; the kernel's default. The quota is
// cpu × period.
const CFSPeriodMicros = 100_000

// Versions reported by Manager.Version.
const (
	V1 = "v1"
	V2 = "v2"
)

// unlimitedMemory is the smallest limit read back as "no limit": v1 reports an unset limit
// as 9223372036854771712 (PAGE_COUNTER_MAX pages), v2 as "max".
const unlimitedMemory = 1 << 62

// ErrMemoryInUse is returned by Apply when the kernel refuses a memory limit below what the
// cgroup uses and cannot reclaim (EBUSY on cgroup v1).
var ErrMemoryInUse = errors.New("memory limit below current usage")

// Limits are the limits node-ctl enforces on the pool's cgroup.
type Limits struct {
	// CPUMilli is the pool's cpu in millicores: the CFS quota and the cpu shares (v1) or
	// weight (v2), computed as the kubelet does for a container.
	CPUMilli int64
	// MemoryBytes is the memory limit.
	MemoryBytes int64
}

// Stats is what node-ctl reports from the cgroup.
type Stats struct {
	// MemoryLimitBytes is the limit in force; 0 when none is set.
	MemoryLimitBytes int64
	// MemoryUsageBytes is the raw usage, page cache included.
	MemoryUsageBytes int64
	// MemoryWorkingSetBytes is usage minus inactive file cache (floored at 0), the kubelet's
	// working set: what a smaller limit could not reclaim.
	MemoryWorkingSetBytes int64
	// OOMKills counts processes the kernel killed for reaching the limit (0 when the kernel
	// does not report it).
	OOMKills uint64
}

// driver is one cgroup version's implementation.
type driver interface {
	apply(Limits) error
	stats() (Stats, error)
	addProcess(pid int) error
	processes() ([]int, error)
	delete() error
}

// Manager is one node-level cgroup. Its methods are safe for concurrent use as far as the
// kernel's files are; node-ctl serialises Apply itself.
type Manager struct {
	path    string
	version string
	driver  driver
}

// Open creates the cgroup at path (absolute, relative to each controller's root, never the
// root itself) with the cpu and memory controllers, or opens it when it exists. Existing
// limits are left as they are.
func Open(p string) (*Manager, error) {
	if err := validatePath(p); err != nil {
		return nil, err
	}
	var (
		d       driver
		version string
		err     error
	)
	switch mode := cgroups.Mode(); mode {
	case cgroups.Legacy, cgroups.Hybrid:
		version = V1
		d, err = openV1(p)
	case cgroups.Unified:
		version = V2
		d, err = openV2(p)
	default:
		return nil, errors.New("no cgroup filesystem mounted at /sys/fs/cgroup")
	}
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s (%s): %w", p, version, err)
	}
	return &Manager{path: p, version: version, driver: d}, nil
}

func validatePath(p string) error {
	switch {
	case !path.IsAbs(p):
		return fmt.Errorf("cgroup path %q must be absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("cgroup path %q must be clean (%q)", p, path.Clean(p))
	case p == "/":
		return errors.New("cgroup path must not be the root cgroup")
	case strings.HasPrefix(p, "/sys/fs/cgroup"):
		return fmt.Errorf("cgroup path %q must be relative to the cgroup root, without /sys/fs/cgroup", p)
	}
	return nil
}

// Path is the cgroup's path relative to the controllers' roots.
func (m *Manager) Path() string { return m.path }

// Version is V1 or V2.
func (m *Manager) Version() string { return m.version }

// Apply sets the memory limit first (the step the kernel may refuse, see ErrMemoryInUse),
// then the cpu quota and shares or weight. When the memory step fails nothing changed.
func (m *Manager) Apply(l Limits) error {
	if l.CPUMilli <= 0 || l.MemoryBytes <= 0 {
		return fmt.Errorf("invalid limits %+v: cpu and memory must be positive", l)
	}
	if err := m.driver.apply(l); err != nil {
		return fmt.Errorf("applying limits to cgroup %s: %w", m.path, err)
	}
	return nil
}

// Stats reads the cgroup's memory figures.
func (m *Manager) Stats() (Stats, error) {
	s, err := m.driver.stats()
	if err != nil {
		return Stats{}, fmt.Errorf("reading stats of cgroup %s: %w", m.path, err)
	}
	return s, nil
}

// AddProcess moves the process pid into the cgroup. On cgroup v1 the memory the process
// already uses stays charged where it was; only new allocations are charged here.
func (m *Manager) AddProcess(pid int) error {
	if err := m.driver.addProcess(pid); err != nil {
		return fmt.Errorf("adding pid %d to cgroup %s: %w", pid, m.path, err)
	}
	return nil
}

// Processes lists the pids in the cgroup and its descendants.
func (m *Manager) Processes() ([]int, error) {
	pids, err := m.driver.processes()
	if err != nil {
		return nil, fmt.Errorf("listing processes of cgroup %s: %w", m.path, err)
	}
	return pids, nil
}

// Delete removes the cgroup. It fails while processes are in it.
func (m *Manager) Delete() error {
	if err := m.driver.delete(); err != nil {
		return fmt.Errorf("deleting cgroup %s: %w", m.path, err)
	}
	return nil
}

// cpuQuota is the CFS quota in microseconds per CFSPeriodMicros for milli millicores.
func cpuQuota(milli int64) int64 { return milli * CFSPeriodMicros / 1000 }

// cpuShares converts millicores to cgroup v1 cpu.shares as the kubelet does
// (MilliCPUToShares): 1024 per core, clamped to the kernel's [2, 262144].
func cpuShares(milli int64) uint64 {
	const minShares, maxShares = 2, 262144
	shares := milli * 1024 / 1000
	return uint64(min(max(shares, minShares), maxShares))
}

// cpuWeight converts cpu.shares to cgroup v2 cpu.weight with the formula runc and the
// kubelet use: [2, 262144] maps linearly onto [1, 10000].
func cpuWeight(shares uint64) uint64 {
	return 1 + ((shares-2)*9999)/262142
}

// memoryLimit turns a limit read from the kernel into Stats.MemoryLimitBytes.
func memoryLimit(v uint64) int64 {
	if v >= unlimitedMemory {
		return 0
	}
	return int64(v)
}

// workingSet is usage minus inactive file cache, floored at 0.
func workingSet(usage, inactiveFile uint64) int64 {
	if inactiveFile >= usage {
		return 0
	}
	return int64(usage - inactiveFile)
}

// Available says why real cgroups cannot be managed here (not root, no cgroup filesystem,
// cpu or memory controller missing), or nil when they can. Tests use it to skip.
func Available() error {
	switch cgroups.Mode() {
	case cgroups.Legacy, cgroups.Hybrid:
		_, err := v1Hierarchy()
		return err
	case cgroups.Unified:
		return v2Available()
	default:
		return errors.New("no cgroup filesystem mounted at /sys/fs/cgroup")
	}
}
