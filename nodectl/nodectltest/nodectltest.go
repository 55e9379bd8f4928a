// Package nodectltest gives tests a real node-ctl peer and the tools around it:
//
//   - Start launches the real cmd/node-ctl binary (built once per test binary) on real
//     cgroups, with Stop/Kill/Restart/Signal for fault injection; it needs root.
//   - StartFake runs the reference server in-process with a FakeCgroup, for tests of the
//     contract that must run without root.
//   - StartHog puts a real memory hog into a cgroup (e.g. node-ctl's) and holds N MiB.
//   - RequireCgroups, CgroupPath and ShortTempDir are the building blocks.
//
// Real-cgroup helpers skip the test when cgroups cannot be managed here, unless the
// environment variable RequireEnv is set (make test sets it; CI runs as root), in which
// case they fail it: CI can never pass by skipping the real parts.
package nodectltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/client"
)

// RequireEnv, when set, turns a skip for missing real parts into a failure. It is the
// variable tests/framework.RequireToolsEnv names; repeated here so that node-ctl's tests
// do not import the control-plane framework.
const RequireEnv = "SANDBOXPOOL_REQUIRE_TOOLS"

// Timeouts of the helpers' polls. They are deadlines, not sleeps: a poll returns as soon
// as its condition holds.
const (
	// processTimeout bounds a node-ctl or hog process starting, becoming healthy, or
	// exiting after a signal.
	processTimeout = 15 * time.Second
	// pollInterval is the pause between two checks of a condition.
	pollInterval = 20 * time.Millisecond
)

// RequireCgroups skips t (or fails it under RequireEnv) unless this process can create
// and limit cgroups: root, a cgroup filesystem with the cpu and memory controllers.
func RequireCgroups(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "real cgroup tests need root"
	} else if err := cgroup.Available(); err != nil {
		why = "cgroup controllers unavailable: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (and %s is set)", why, RequireEnv)
	}
	t.Skip(why)
}

// CgroupPath returns a fresh cgroup path for t ("/sandboxpool-test-<random>"), not yet
// created. t's cleanup kills every process left in it and deletes it. It skips t unless
// RequireCgroups passes.
func CgroupPath(t testing.TB) string {
	t.Helper()
	RequireCgroups(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := "/sandboxpool-test-" + hex.EncodeToString(b)
	t.Cleanup(func() { removeCgroup(t, p) })
	return p
}

// removeCgroup kills whatever is left in the cgroup at p and deletes it.
func removeCgroup(t testing.TB, p string) {
	t.Helper()
	cg, err := cgroup.Open(p)
	if err != nil {
		t.Errorf("opening cgroup %s for cleanup: %v", p, err)
		return
	}
	err = Poll(processTimeout, func() error {
		pids, err := cg.Processes()
		if err != nil {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) > 0 {
			return errors.New("processes left in the cgroup")
		}
		return cg.Delete()
	})
	if err != nil {
		t.Errorf("cleaning up cgroup %s: %v", p, err)
	}
}

// WriteConfig writes cfg to path with client.WriteConfig, failing t on error.
func WriteConfig(t testing.TB, path string, cfg api.Config) {
	t.Helper()
	if err := client.WriteConfig(path, cfg); err != nil {
		t.Fatalf("%v", err)
	}
}

// Config is a valid config for tests: pool "placeholder-test" with the given generation,
// cpu and memory.
func Config(generation int64, cpu, memory string) api.Config {
	return api.Config{
		APIVersion: api.APIVersion,
		Pool:       api.PoolRef{Name: "placeholder-test", UID: "00000000-0000-0000-0000-000000000001"},
		Generation: generation,
		Resources:  map[string]string{api.ResourceCPU: cpu, api.ResourceMemory: memory},
	}
}

// Poll calls cond every pollInterval until it returns nil or timeout passes, and returns
// the last error then. An error wrapped with Permanent ends the poll at once.
func Poll(timeout time.Duration, cond func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		if perm, ok := errors.AsType[permanentError](last); ok {
			return false, perm.err
		}
		return last == nil, nil
	})
	if wait.Interrupted(err) {
		return last
	}
	return err
}

// Permanent wraps err so that Poll returns it at once instead of retrying.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// WaitHealthy polls c's health until node-ctl answers ok, failing t when exited is closed
// first (the process died) or processTimeout passes.
func WaitHealthy(t testing.TB, c *client.Client, exited <-chan struct{}) {
	t.Helper()
	err := Poll(processTimeout, func() error {
		select {
		case <-exited:
			return Permanent(errExited)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Health(ctx)
		return err
	})
	if err != nil {
		t.Fatalf("node-ctl at %s did not become healthy: %v", c.SocketPath(), err)
	}
}

var errExited = errors.New("node-ctl exited")

// testLogger logs to t's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
