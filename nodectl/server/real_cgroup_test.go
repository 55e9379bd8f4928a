package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/nodectl/server"
	"github.com/agentcube/sandboxpool/tests/support"
)

const realDeadline = 30 * time.Second

// realServer runs the reference server in-process on the real cgroup at cgroupPath until
// the returned stop is called (or t ends).
func realServer(t *testing.T, socket, configPath, cgroupPath string) (stop func()) {
	t.Helper()
	cg, err := cgroup.Open(cgroupPath)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{SocketPath: socket, ConfigPath: configPath, Zone: "zone-r", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	stopRun := run(t, srv, socket)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := stopRun(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitState polls the state until ok accepts it.
func waitState(t *testing.T, c *client.Client, what string, ok func(*api.State) bool) *api.State {
	t.Helper()
	var last *api.State
	err := nodectltest.Poll(realDeadline, func() error {
		st, err := c.State(context.Background())
		if err != nil {
			return err
		}
		last = st
		if !ok(st) {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last state %+v", what, err, last)
	}
	return last
}

// TestRealCgroup drives the reference server over its socket on a real cgroup: limits
// reach the kernel, usage is reported, the limit is enforced, a shrink below usage is
// refused with the old limits kept, a raise applies, and a restarted server re-applies
// the config file.
func TestRealCgroup(t *testing.T) {
	nodectltest.RequireCgroups(t)
	cgPath := nodectltest.CgroupPath(t)
	dir := support.ShortTempDir(t)
	socket, configPath := filepath.Join(dir, "nc.sock"), filepath.Join(dir, "node-ctl.json")
	stop := realServer(t, socket, configPath, cgPath)
	c := client.New(socket)

	// cpu 500m / memory 64Mi reach the kernel's files.
	nodectltest.WriteConfig(t, configPath, nodectltest.Config(1, "500m", "64Mi"))
	st, err := c.Reload(ctx(t))
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if st.AppliedGeneration != 1 || st.AllocatableMemoryBytes != 64*mib || st.CgroupPath != cgPath {
		t.Errorf("state after reload = %+v", st)
	}
	limits := nodectltest.ReadKernelLimits(t, cgPath)
	if limits.MemoryBytes != 64*mib || limits.CPUQuotaMicros != 50000 || limits.CPUPeriodMicros != 100000 {
		t.Fatalf("kernel limits = %+v, want 64 MiB and 50000/100000 us", limits)
	}
	t.Logf("kernel limits after 500m/64Mi (%s): %+v", st.CgroupVersion, limits)

	// The limit is real: a hog asking for 128 MiB is OOM-killed and never exceeds 64 MiB.
	big := nodectltest.StartHog(t, cgPath, 128)
	if err := big.WaitAllocated(realDeadline); err == nil || !big.OOMKilled() {
		t.Fatalf("a 128 MiB hog in the 64 MiB pool: %v, OOM-killed %v", err, big.OOMKilled())
	}
	if peak := nodectltest.PeakMemoryBytes(t, cgPath); peak > 64*mib+nodectltest.OOMSlackBytes {
		t.Errorf("peak usage %d exceeded the 64 MiB limit (plus the OOM slack)", peak)
	}

	// Usage shows up as allocated memory.
	hog := nodectltest.StartHog(t, cgPath, 40)
	if err := hog.WaitAllocated(realDeadline); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, c, "allocated >= 40 MiB", func(s *api.State) bool { return s.AllocatedMemoryBytes >= 40*mib })
	t.Logf("with a 40 MiB hog: allocated %d, usage %d", st.AllocatedMemoryBytes, st.MemoryUsageBytes)

	// Shrinking below the usage is refused; the old limits and state stay.
	nodectltest.WriteConfig(t, configPath, nodectltest.Config(2, "250m", "16Mi"))
	serr := reloadErr(t, c)
	if serr.StatusCode != http.StatusConflict || serr.Body.Reason != api.ReasonMemoryInUse || serr.Body.Field != "resources[memory]" {
		t.Fatalf("shrink under the hog = %v, want 409 MemoryInUse", serr)
	}
	if got := nodectltest.ReadKernelLimits(t, cgPath); got != limits {
		t.Errorf("kernel limits after the refused shrink = %+v, want unchanged %+v", got, limits)
	}
	st = mustState(t, c)
	if st.AppliedGeneration != 1 || st.AllocatableMemoryBytes != 64*mib || st.LastReloadError == nil {
		t.Errorf("state after the refused shrink = %+v", st)
	}

	// Raising applies, with the new generation.
	nodectltest.WriteConfig(t, configPath, nodectltest.Config(3, "1", "128Mi"))
	st, err = c.Reload(ctx(t))
	if err != nil {
		t.Fatalf("raise: %v", err)
	}
	if st.AppliedGeneration != 3 || st.AllocatableMemoryBytes != 128*mib || st.LastReloadError != nil {
		t.Errorf("state after raising = %+v", st)
	}
	raised := nodectltest.ReadKernelLimits(t, cgPath)
	if raised.MemoryBytes != 128*mib || raised.CPUQuotaMicros != 100000 {
		t.Errorf("kernel limits after raising = %+v", raised)
	}

	// A restarted node-ctl re-applies the config file: scribble over the limits while it
	// is down, and they come back. The hog survives the restart.
	stop()
	writeCgroupFile(t, cgPath, st.CgroupVersion)
	if got := nodectltest.ReadKernelLimits(t, cgPath); got == raised {
		t.Fatalf("scribbling did not change the limits")
	}
	realServer(t, socket, configPath, cgPath)
	st = mustState(t, c)
	if st.AppliedGeneration != 3 || st.AllocatedMemoryBytes < 40*mib {
		t.Errorf("state after restart = %+v", st)
	}
	if got := nodectltest.ReadKernelLimits(t, cgPath); got != raised {
		t.Errorf("kernel limits after restart = %+v, want re-applied %+v", got, raised)
	}
	hog.Release()
	waitState(t, c, "allocated back under 40 MiB", func(s *api.State) bool { return s.AllocatedMemoryBytes < 40*mib })
}

// writeCgroupFile raises the memory limit and lifts the cpu quota behind node-ctl's back.
func writeCgroupFile(t *testing.T, cgPath, version string) {
	t.Helper()
	files := map[string]string{
		filepath.Join("/sys/fs/cgroup/memory", cgPath, "memory.limit_in_bytes"): fmt.Sprint(256 * mib),
		filepath.Join("/sys/fs/cgroup/cpu", cgPath, "cpu.cfs_quota_us"):         "-1",
	}
	if version == cgroup.V2 {
		files = map[string]string{
			filepath.Join("/sys/fs/cgroup", cgPath, "memory.max"): fmt.Sprint(256 * mib),
			filepath.Join("/sys/fs/cgroup", cgPath, "cpu.max"):    "max 100000",
		}
	}
	for f, v := range files {
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
