package framework

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Usage is a process's CPU time and memory at one moment, read from /proc.
type Usage struct {
	At             time.Time
	CPU            time.Duration // user + system
	RSSKiB, HWMKiB int           // resident now, and its peak
}

// CoresSince is the average number of cores the process used between b and u.
func (u Usage) CoresSince(b Usage) float64 {
	return (u.CPU - b.CPU).Seconds() / u.At.Sub(b.At).Seconds()
}

// ProcUsage reads pid's CPU time and memory.
func ProcUsage(pid int) (Usage, error) {
	u := Usage{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command name (which may hold spaces) start after ") ".
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	const clockTicks = 100 // USER_HZ on Linux
	u.CPU = time.Duration(ut+st) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for l := range strings.SplitSeq(string(status), "\n") {
		var v int
		if _, err := fmt.Sscanf(l, "VmRSS: %d kB", &v); err == nil {
			u.RSSKiB = v
		}
		if _, err := fmt.Sscanf(l, "VmHWM: %d kB", &v); err == nil {
			u.HWMKiB = v
		}
	}
	return u, nil
}

// Percentile is the p-th percentile (nearest rank) of ds, rounded to 0.1 ms; 0 when empty.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(100 * time.Microsecond)
}
