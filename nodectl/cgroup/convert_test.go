package cgroup

import (
	"strings"
	"testing"
)

func TestCPUConversions(t *testing.T) {
	for _, tc := range []struct {
		milli          int64
		quota          int64
		shares, weight uint64
	}{
		{milli: 10, quota: 1000, shares: 10, weight: 1},
		{milli: 500, quota: 50000, shares: 512, weight: 20},
		{milli: 1000, quota: 100000, shares: 1024, weight: 39},
		{milli: 4000, quota: 400000, shares: 4096, weight: 157},
		{milli: 1, quota: 100, shares: 2, weight: 1},                      // shares clamp low
		{milli: 1 << 20, quota: 104857600, shares: 262144, weight: 10000}, // shares clamp high
	} {
		if got := cpuQuota(tc.milli); got != tc.quota {
			t.Errorf("cpuQuota(%d) = %d, want %d", tc.milli, got, tc.quota)
		}
		shares := cpuShares(tc.milli)
		if shares != tc.shares {
			t.Errorf("cpuShares(%d) = %d, want %d", tc.milli, shares, tc.shares)
		}
		if got := cpuWeight(shares); got != tc.weight {
			t.Errorf("cpuWeight(%d) = %d, want %d", shares, got, tc.weight)
		}
	}
}

func TestMemoryFigures(t *testing.T) {
	if got := memoryLimit(9223372036854771712); got != 0 {
		t.Errorf("v1 unset limit = %d, want 0 (unlimited)", got)
	}
	if got := memoryLimit(^uint64(0)); got != 0 {
		t.Errorf("v2 max = %d, want 0 (unlimited)", got)
	}
	if got := memoryLimit(64 << 20); got != 64<<20 {
		t.Errorf("64Mi = %d", got)
	}
	if got := workingSet(100, 30); got != 70 {
		t.Errorf("workingSet(100, 30) = %d, want 70", got)
	}
	if got := workingSet(30, 100); got != 0 {
		t.Errorf("workingSet(30, 100) = %d, want 0 (floored)", got)
	}
}

func TestValidatePath(t *testing.T) {
	for p, want := range map[string]string{
		"/sandbox-pool":             "",
		"/kubepods/sandbox-pool":    "",
		"sandbox-pool":              "must be absolute",
		"/sandbox-pool/":            "must be clean",
		"/a/../b":                   "must be clean",
		"/":                         "root cgroup",
		"/sys/fs/cgroup/memory/foo": "without /sys/fs/cgroup",
	} {
		err := validatePath(p)
		switch {
		case want == "" && err != nil:
			t.Errorf("validatePath(%q) = %v, want nil", p, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("validatePath(%q) = %v, want an error saying %q", p, err, want)
		}
	}
}
