package agentclient_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	"github.com/agentcube/sandboxpool/agent/shimapi/shimapitest"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/shim/agentclient"
)

// startAgent serves a recording agent on a short socket path (unix sockets: 108 bytes).
func startAgent(t *testing.T) *shimapitest.Agent {
	t.Helper()
	return shimapitest.StartTest(t)
}

func newClient(t *testing.T, address string, timeout time.Duration) *agentclient.Client {
	t.Helper()
	c := agentclient.New(agentclient.Config{Address: address, Timeout: timeout})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func create(id string) *v1.CreateRequest {
	return &v1.CreateRequest{Identity: &v1.Identity{Namespace: "test", ContainerId: id, PoolName: "placeholder-node-a"}}
}

func TestCreateReachesTheAgentWithTheIdentity(t *testing.T) {
	a := startAgent(t)
	c := newClient(t, "unix://"+a.Address(), time.Second)
	if err := c.Create(t.Context(), create("c1")); err != nil {
		t.Fatal(err)
	}
	calls := a.CallsFor("c1")
	if len(calls) != 1 || calls[0].Method != shimapitest.MethodCreate || calls[0].Identity.GetPoolName() != "placeholder-node-a" {
		t.Fatalf("agent saw %+v, want one Create of c1 in pool placeholder-node-a", calls)
	}
}

func TestCreateFailsClearlyWhileTheAgentIsDown(t *testing.T) {
	a := startAgent(t)
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, a.Address(), 300*time.Millisecond)
	start := time.Now()
	err := c.Create(t.Context(), create("c1"))
	if err == nil {
		t.Fatal("Create succeeded with the agent down")
	}
	if !errdefs.IsUnavailable(err) {
		t.Errorf("error %v is not Unavailable", err)
	}
	for _, want := range []string{a.Address(), "unreachable", "kubelet will retry", "c1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Bounded: the timeout plus one backoff step at most.
	if d := time.Since(start); d > 300*time.Millisecond+time.Second {
		t.Errorf("Create took %s with a 300ms budget", d)
	}
}

func TestCreateSucceedsOnceTheAgentIsBack(t *testing.T) {
	a := startAgent(t)
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, a.Address(), 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Create(context.Background(), create("c1")) }()
	if err := a.Up(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Create after the agent came back: %v", err)
	}
	if got := a.Tasks()["c1"].Creates; got != 1 {
		t.Errorf("agent saw %d Creates of c1, want 1", got)
	}
}

func TestCallsRedialAfterTheAgentRestarted(t *testing.T) {
	a := startAgent(t)
	c := newClient(t, a.Address(), 5*time.Second)
	if err := c.Create(t.Context(), create("c1")); err != nil {
		t.Fatal(err)
	}
	// The agent restarts: the shim's connection is stale.
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	if err := a.Up(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context(), &v1.StartRequest{Identity: create("c1").Identity}); err != nil {
		t.Fatalf("Start after an agent restart: %v", err)
	}
	if err := c.Delete(t.Context(), &v1.DeleteRequest{Identity: create("c1").Identity}); err != nil {
		t.Fatalf("Delete after an agent restart: %v", err)
	}
	got := shimapitest.Methods(a.CallsFor("c1"))
	if want := "Create Start Delete"; got != want {
		t.Errorf("agent saw %q, want %q", got, want)
	}
}

func TestAnswersOfTheAgentAreNotRetried(t *testing.T) {
	a := startAgent(t)
	a.Fail(shimapitest.MethodCreate, 1, errdefs.ErrFailedPrecondition.WithMessage("pool placeholder-node-a is being deleted"))
	c := newClient(t, a.Address(), 5*time.Second)
	err := c.Create(t.Context(), create("c1"))
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "pool placeholder-node-a is being deleted") {
		t.Fatalf("Create = %v, want the agent's FailedPrecondition", err)
	}
	if n := len(a.CallsFor("c1")); n != 1 {
		t.Errorf("agent saw %d calls, want 1 (no retry of an answer)", n)
	}
}

// An agent that took the call but does not answer fails it after the call timeout, with
// no retry (the agent may be working on it), and the error says so.
func TestCreateFailsWhenTheAgentDoesNotAnswer(t *testing.T) {
	a := startAgent(t)
	release := a.Hold(shimapitest.MethodCreate)
	defer release()
	c := agentclient.New(agentclient.Config{Address: a.Address(), Timeout: 5 * time.Second, CallTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	err := c.Create(t.Context(), create("c1"))
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "did not answer Create of c1 within 200ms") {
		t.Fatalf("Create = %v, want Unavailable saying the agent did not answer", err)
	}
	// The agent sees the caller give up.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.WaitFor(ctx, func(calls []shimapitest.Call) bool { return len(calls) > 0 }); err != nil {
		t.Fatal(err)
	}
	if got := shimapitest.Methods(a.CallsFor("c1")); got != "Create(failed)" {
		t.Errorf("agent received %q, want one Create the caller gave up on (no retry of a call it took)", got)
	}
}

func TestNotificationsFailFastWhileTheAgentIsDown(t *testing.T) {
	a := startAgent(t)
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, a.Address(), time.Minute)
	start := time.Now()
	if err := c.Shutdown(t.Context(), &v1.ShutdownRequest{Identity: create("c1").Identity}); err == nil {
		t.Fatal("Shutdown reported success with the agent down")
	}
	if d := time.Since(start); d > agentclient.NotifyTimeout {
		t.Errorf("Shutdown took %s, more than its %s bound", d, agentclient.NotifyTimeout)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(shimapi.AddressEnv, "")
	t.Setenv(agentclient.TimeoutEnv, "")
	cfg, err := agentclient.ConfigFromEnv()
	if err != nil || cfg.Address != shimapi.DefaultAddress || cfg.Timeout != agentclient.DefaultTimeout {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	t.Setenv(shimapi.AddressEnv, "unix:///run/x/agent.sock")
	t.Setenv(agentclient.TimeoutEnv, "1500ms")
	if cfg, err = agentclient.ConfigFromEnv(); err != nil || cfg.Address != "unix:///run/x/agent.sock" || cfg.Timeout != 1500*time.Millisecond {
		t.Fatalf("from the environment: %+v, %v", cfg, err)
	}
	for env, bad := range map[string]string{agentclient.TimeoutEnv: "soon", shimapi.AddressEnv: "tcp://127.0.0.1:1"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, bad)
			if _, err := agentclient.ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), env) {
				t.Errorf("%s=%s: error %v does not name the variable", env, bad, err)
			}
		})
	}
}

// TestAnnounceRepeatsStartToARestartedAgent: after a Start, Announce waits; when the agent
// goes away and comes back (an agent restart), it tells the new one of the running task
// again, with the shim's PID; it returns once its context ends.
func TestAnnounceRepeatsStartToARestartedAgent(t *testing.T) {
	a := startAgent(t)
	c := newClient(t, "unix://"+a.Address(), time.Second)
	start := &v1.StartRequest{Identity: &v1.Identity{Namespace: "test", ContainerId: "c1", Sandbox: true, PoolName: "placeholder-node-a"},
		ShimPid: uint32(os.Getpid())}
	if err := c.Start(t.Context(), start); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Announce(ctx, start)
	}()
	starts := func(calls []shimapitest.Call) int {
		n := 0
		for _, call := range calls {
			if call.Method == shimapitest.MethodStart {
				n++
			}
		}
		return n
	}
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	if err := a.Up(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	if err := a.WaitFor(wctx, func(calls []shimapitest.Call) bool { return starts(calls) >= 2 }); err != nil {
		t.Fatalf("the restarted agent was not told of the running task: %v (calls %s)", err, shimapitest.Methods(a.CallsFor("c1")))
	}
	cancel()
	<-done // Announce returns once its context ends
}
