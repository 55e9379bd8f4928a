package nodectltest_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/tests/support"
)

const (
	mib      = 1 << 20
	deadline = 30 * time.Second
)

func ctx(t *testing.T) context.Context {
	return support.Context(t, 10*time.Second)
}

func state(t *testing.T, p *nodectltest.Process) *api.State {
	t.Helper()
	st, err := p.Client.State(ctx(t))
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return st
}

func waitState(t *testing.T, p *nodectltest.Process, what string, ok func(*api.State) bool) *api.State {
	t.Helper()
	var last *api.State
	err := nodectltest.Poll(deadline, func() error {
		st, err := p.Client.State(context.Background())
		if err != nil {
			return err
		}
		if last = st; !ok(st) {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last state %+v", what, err, last)
	}
	return last
}

// TestProcessLifecycle drives the real node-ctl binary as the agent will: config applied
// at start, SIGHUP and POST reloads, a bad config kept out, restart (SIGTERM and start
// again) re-applying the file, a crash (SIGKILL) seen as unreachable, and a start over
// the crashed process's stale socket.
func TestProcessLifecycle(t *testing.T) {
	cfg := nodectltest.Config(1, "500m", "64Mi")
	p := nodectltest.Start(t, nodectltest.Options{Zone: "zone-1", Config: &cfg})

	st := state(t, p)
	if st.AppliedGeneration != 1 || st.Zone != "zone-1" || st.PID != p.Pid() || st.CgroupPath != p.CgroupPath {
		t.Fatalf("state at start = %+v", st)
	}
	if l := nodectltest.ReadKernelLimits(t, p.CgroupPath); l.MemoryBytes != 64*mib || l.CPUQuotaMicros != 50000 {
		t.Fatalf("kernel limits at start = %+v", l)
	}

	// SIGHUP reloads.
	p.WriteConfig(nodectltest.Config(2, "1", "128Mi"))
	p.Signal(syscall.SIGHUP)
	waitState(t, p, "generation 2 after SIGHUP", func(s *api.State) bool { return s.AppliedGeneration == 2 })
	if l := nodectltest.ReadKernelLimits(t, p.CgroupPath); l.MemoryBytes != 128*mib || l.CPUQuotaMicros != 100000 {
		t.Errorf("kernel limits after SIGHUP = %+v", l)
	}

	// Sandboxes' memory shows up, and survives node-ctl restarts.
	hog := nodectltest.StartHog(t, p.CgroupPath, 40)
	if err := hog.WaitAllocated(deadline); err != nil {
		t.Fatal(err)
	}
	waitState(t, p, "40 MiB allocated", func(s *api.State) bool { return s.AllocatedMemoryBytes >= 40*mib })

	// A bad config is rejected and generation 2 stays in force.
	if err := os.WriteFile(p.ConfigPath, []byte(`{"apiVersion": "nodectl.sandbox-pool.io/v1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Client.Reload(ctx(t)); !errors.Is(err, client.ErrRejected) {
		t.Fatalf("reload of a bad config = %v, want ErrRejected", err)
	}
	if st := state(t, p); st.AppliedGeneration != 2 || st.LastReloadError == nil {
		t.Errorf("state after the bad reload = %+v", st)
	}

	// Restarted with the bad file, node-ctl applies nothing and says why; the kernel keeps
	// the limits it had.
	first := st.StartedAt
	p.Restart()
	st = state(t, p)
	if st.Applied() || st.LastReloadError == nil || st.LastReloadError.Reason != api.ReasonInvalidConfig {
		t.Errorf("state after restart with a bad file = %+v", st)
	}
	if !st.StartedAt.After(first) || st.AllocatableMemoryBytes != 128*mib {
		t.Errorf("after restart: startedAt %v (first %v), allocatable %d", st.StartedAt, first, st.AllocatableMemoryBytes)
	}

	// Restarted with a good file, node-ctl applies it at start.
	p.WriteConfig(nodectltest.Config(3, "750m", "96Mi"))
	p.Restart()
	st = state(t, p)
	if st.AppliedGeneration != 3 || st.AllocatableMemoryBytes != 96*mib || st.AllocatedMemoryBytes < 40*mib {
		t.Errorf("state after restart = %+v", st)
	}
	if l := nodectltest.ReadKernelLimits(t, p.CgroupPath); l.MemoryBytes != 96*mib || l.CPUQuotaMicros != 75000 {
		t.Errorf("kernel limits after restart = %+v", l)
	}

	// A crash: unreachable, socket file left behind; a new start takes the stale socket
	// over and re-applies the file.
	p.Kill()
	if _, err := p.Client.Health(ctx(t)); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("health after SIGKILL = %v, want ErrUnreachable", err)
	}
	if _, err := os.Lstat(p.SocketPath); err != nil {
		t.Errorf("the killed process's socket file is gone (%v); the stale-socket path is not exercised", err)
	}
	p.Start()
	if st := state(t, p); st.AppliedGeneration != 3 {
		t.Errorf("state after crash and start = %+v", st)
	}
	if !hog.Running() {
		t.Errorf("the hog died with node-ctl")
	}
}

func TestDeleteCgroupOnExit(t *testing.T) {
	cfg := nodectltest.Config(1, "500m", "64Mi")

	t.Run("empty cgroup is deleted", func(t *testing.T) {
		p := nodectltest.Start(t, nodectltest.Options{Config: &cfg, Args: []string{"--delete-cgroup-on-exit"}})
		p.Stop()
		for _, c := range []string{"cpu", "memory"} {
			if nodectltest.CgroupExists(t, p.CgroupPath, c) {
				t.Errorf("%s cgroup still exists", c)
			}
		}
	})

	t.Run("cgroup with sandboxes is kept", func(t *testing.T) {
		p := nodectltest.Start(t, nodectltest.Options{Config: &cfg, Args: []string{"--delete-cgroup-on-exit"}})
		hog := nodectltest.StartHog(t, p.CgroupPath, 8)
		if err := hog.WaitAllocated(deadline); err != nil {
			t.Fatal(err)
		}
		p.Stop()
		if !nodectltest.CgroupExists(t, p.CgroupPath, "memory") {
			t.Errorf("the cgroup was deleted under a running sandbox")
		}
		if l := nodectltest.ReadKernelLimits(t, p.CgroupPath); l.MemoryBytes != 64*mib {
			t.Errorf("kept cgroup limits = %+v", l)
		}
	})

	t.Run("default keeps the cgroup", func(t *testing.T) {
		p := nodectltest.Start(t, nodectltest.Options{Config: &cfg})
		p.Stop()
		if !nodectltest.CgroupExists(t, p.CgroupPath, "memory") {
			t.Errorf("the cgroup was deleted without --delete-cgroup-on-exit")
		}
	})
}
