package nodectltest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3"
)

// cgroupRoot is where the cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// KernelLimits are a cgroup's limits as the kernel's files show them, read without the
// cgroups library so that tests check node-ctl against the kernel, not against itself.
type KernelLimits struct {
	// MemoryBytes is memory.limit_in_bytes (v1) or memory.max (v2); 0 when unlimited.
	MemoryBytes int64
	// CPUQuotaMicros and CPUPeriodMicros are cpu.cfs_quota_us and cpu.cfs_period_us (v1)
	// or cpu.max (v2); the quota is -1 when unlimited.
	CPUQuotaMicros, CPUPeriodMicros int64
	// CPUShares is cpu.shares (v1); 0 on v2.
	CPUShares int64
	// CPUWeight is cpu.weight (v2); 0 on v1.
	CPUWeight int64
}

// ReadKernelLimits reads the limits of the cgroup at cgroupPath from its files.
func ReadKernelLimits(t testing.TB, cgroupPath string) KernelLimits {
	t.Helper()
	var l KernelLimits
	if cgroups.Mode() == cgroups.Unified {
		if mem := CgroupFile(t, cgroupPath, "memory", "memory.max"); mem != "max" {
			l.MemoryBytes = parseInt(t, mem)
		}
		quota, period, _ := strings.Cut(CgroupFile(t, cgroupPath, "cpu", "cpu.max"), " ")
		l.CPUQuotaMicros, l.CPUPeriodMicros = -1, parseInt(t, period)
		if quota != "max" {
			l.CPUQuotaMicros = parseInt(t, quota)
		}
		l.CPUWeight = parseInt(t, CgroupFile(t, cgroupPath, "cpu", "cpu.weight"))
		return l
	}
	if mem := parseInt(t, CgroupFile(t, cgroupPath, "memory", "memory.limit_in_bytes")); mem < 1<<62 {
		l.MemoryBytes = mem
	}
	l.CPUQuotaMicros = parseInt(t, CgroupFile(t, cgroupPath, "cpu", "cpu.cfs_quota_us"))
	l.CPUPeriodMicros = parseInt(t, CgroupFile(t, cgroupPath, "cpu", "cpu.cfs_period_us"))
	l.CPUShares = parseInt(t, CgroupFile(t, cgroupPath, "cpu", "cpu.shares"))
	return l
}

// CgroupFile returns the trimmed content of the file name of the cgroup at cgroupPath;
// controller ("cpu", "memory") picks the hierarchy on a cgroup v1 host.
func CgroupFile(t testing.TB, cgroupPath, controller, name string) string {
	t.Helper()
	dir := filepath.Join(cgroupRoot, cgroupPath)
	if cgroups.Mode() != cgroups.Unified {
		dir = filepath.Join(cgroupRoot, controller, cgroupPath)
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("reading a cgroup file: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// CgroupExists reports whether the cgroup at cgroupPath has a directory for controller.
func CgroupExists(t testing.TB, cgroupPath, controller string) bool {
	t.Helper()
	dir := filepath.Join(cgroupRoot, cgroupPath)
	if cgroups.Mode() != cgroups.Unified {
		dir = filepath.Join(cgroupRoot, controller, cgroupPath)
	}
	_, err := os.Stat(dir)
	return err == nil
}

func parseInt(t testing.TB, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("parsing a cgroup value: %v", err)
	}
	return v
}

// OOMSlackBytes is how far above its memory limit a cgroup's peak usage may go: while the
// OOM killer works the kernel forces some charges through (one page over has been seen on
// cgroup v1). Tests proving a limit compare the peak with the limit plus this slack, which
// is still far below what a hog asked for.
const OOMSlackBytes = 1 << 20

// PeakMemoryBytes is the cgroup's peak memory usage: memory.max_usage_in_bytes (v1) or
// memory.peak (v2, kernel 5.19+).
func PeakMemoryBytes(t testing.TB, cgroupPath string) int64 {
	t.Helper()
	name := "memory.max_usage_in_bytes"
	if cgroups.Mode() == cgroups.Unified {
		name = "memory.peak"
	}
	return parseInt(t, CgroupFile(t, cgroupPath, "memory", name))
}
