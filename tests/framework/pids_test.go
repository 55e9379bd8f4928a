package framework

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestControlPlanePIDs: the PIDs the benchmarks sample are this control plane's
// kube-apiserver and etcd.
func TestControlPlanePIDs(t *testing.T) {
	cp, err := Start()
	Require(t, cp, err)
	t.Cleanup(func() { _ = cp.Stop() })
	for name, get := range map[string]func() (int, error){"kube-apiserver": cp.APIServerPID, "etcd": cp.EtcdPID} {
		pid, err := get()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			t.Fatalf("%s pid %d: %v", name, pid, err)
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(argv[0]) != name {
			t.Errorf("%s pid %d runs %s", name, pid, argv[0])
		}
	}
}
