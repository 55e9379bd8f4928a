// Package shim tests containerd-shim-placeholder-v2 against a real containerd 2.4.2 (built
// by `make containerd`), through ctr and through the CRI API, with the recording agent
// double of agent/shimapi/shimapitest on the other end. The tests run as root and skip
// (or fail under make test) without the tools.
package shim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/agent/shimapi/shimapitest"
	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/shim/manager"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// agentTimeout is the Create/Start retry budget of the shims in these tests.
const agentTimeout = time.Second

const (
	runtimePlaceholder = manager.RuntimeName
	runtimeFailpoint   = "io.containerd.placeholder-fp.v2"
	poolAnnotation     = "sandbox-pool.io/pool-name"
)

// artifacts are the shims and the pause image, built once.
var (
	artifacts *containerdtest.Artifacts
	buildErr  error
)

func TestMain(m *testing.M) {
	if containerdtest.Unavailable() == "" {
		artifacts, buildErr = containerdtest.Build(context.Background())
	}
	code := m.Run()
	if artifacts != nil {
		if err := artifacts.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "removing the built shims:", err)
		}
	}
	os.Exit(code)
}

// env is one test's containerd and agent.
type env struct {
	ctd   *containerdtest.Containerd
	agent *shimapitest.Agent
}

func setUp(t *testing.T) *env {
	t.Helper()
	containerdtest.Require(t)
	if buildErr != nil {
		t.Fatalf("building the shims and the pause image: %v", buildErr)
	}
	agent := shimapitest.StartTest(t)
	ctd := containerdtest.Start(t, containerdtest.Options{
		Artifacts: artifacts, AgentAddress: agent.Address(), AgentTimeout: agentTimeout,
	})
	return &env{ctd: ctd, agent: agent}
}

// ctr runs ctr in the tests' namespace and fails t on an error.
func (e *env) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.ctd.Ctr(t.Context(), append([]string{"-n", containerdtest.Namespace}, args...)...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ctrErr runs ctr and returns its output and error.
func (e *env) ctrErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return e.ctd.Ctr(t.Context(), append([]string{"-n", containerdtest.Namespace}, args...)...)
}

// run starts a detached placeholder task in pool pool.
func (e *env) run(t *testing.T, runtime, id string, extra ...string) {
	t.Helper()
	args := append([]string{"run", "-d", "--runtime", runtime, "--annotation", poolAnnotation + "=placeholder-node-a"}, extra...)
	e.ctr(t, append(args, image.Name, id)...)
}

// taskStatus returns the PID and STATUS columns of `ctr task ls` for id ("" if absent).
func (e *env) taskStatus(t *testing.T, id string) (pid, status string) {
	t.Helper()
	for l := range strings.SplitSeq(e.ctr(t, "task", "ls"), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == id {
			return f[1], f[2]
		}
	}
	return "", ""
}

// waitAgent waits until the agent saw a successful call of method about id.
func (e *env) waitAgent(t *testing.T, method, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.agent.WaitFor(ctx, shimapitest.Has(method, id)); err != nil {
		t.Fatalf("agent never saw %s of %s (saw %s): %v", method, id, shimapitest.Methods(e.agent.CallsFor(id)), err)
	}
}

// waitEvent waits for a task event of id.
func waitEvent(t *testing.T, ev *containerdtest.Events, topic, id string) containerdtest.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, err := ev.Wait(ctx, containerdtest.Task(topic, id))
	if err != nil {
		t.Fatalf("no %s event for %s (events of it: %v): %v", topic, id, ev.Topics(id), err)
	}
	return e
}

// shimOf returns the pid of the only shim process, failing t otherwise.
func (e *env) onlyShim(t *testing.T) int {
	t.Helper()
	shims := e.ctd.ShimPIDs()
	if len(shims) != 1 {
		t.Fatalf("want one shim process, have %v", shims)
	}
	for pid := range shims {
		return pid
	}
	return 0
}

func (e *env) noShimsLeft(t *testing.T) {
	t.Helper()
	containerdtest.Poll(t, 10*time.Second, "shim processes exit", func() bool { return len(e.ctd.ShimPIDs()) == 0 })
}
