package nodectltest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStatCPUTime(t *testing.T) {
	const tail = " S 1 2 3 4 5 6 7 8 9 10 250 130 0 0 20 0 1"
	for stat, want := range map[string]time.Duration{
		"42 (load)" + tail:                    3800 * time.Millisecond,
		"42 (a b) (c))" + tail:                3800 * time.Millisecond,
		"42 (x) R 1 2 3 4 5 6 7 8 9 10 0 0 0": 0,
	} {
		got, err := statCPUTime(stat)
		if err != nil || got != want {
			t.Errorf("statCPUTime(%q) = %v, %v; want %v", stat, got, err, want)
		}
	}
	for _, bad := range []string{"", "42 load S 1", "42 (x) S 1 2 3", "42 (x) S 1 2 3 4 5 6 7 8 9 10 a 0 0", "42 (x) S 1 2 3 4 5 6 7 8 9 10 -1 0 0"} {
		if got, err := statCPUTime(bad); err == nil {
			t.Errorf("statCPUTime(%q) = %v, want an error", bad, got)
		}
	}
}

// A burner runs in the cgroup it was put in, and its cpu time grows.
func TestBurner(t *testing.T) {
	cg := CgroupPath(t)
	b := StartBurner(t, cg, 1)
	procs := CgroupFile(t, cg, "cpu", "cgroup.procs")
	if !slices.Contains(strings.Fields(procs), strconv.Itoa(b.Pid)) {
		t.Fatalf("burner %d is not in %s: %q", b.Pid, cg, procs)
	}
	first, err := b.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if err := Poll(processTimeout, func() error {
		now, err := b.CPUTime()
		if err == nil && now <= first {
			err = fmt.Errorf("cpu time still %v", now)
		}
		return err
	}); err != nil {
		t.Fatalf("the burner's cpu time stays at %v: %v", first, err)
	}
}
