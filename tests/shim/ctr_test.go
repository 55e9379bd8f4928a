package shim

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/agent/shimapi/shimapitest"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// ctr run → RUNNING with pid 0 → kill → exit event with status 0 → delete; the agent saw
// Create, Start, Delete and Shutdown with the task's identity.
func TestCtrRunLifecycle(t *testing.T) {
	e := setUp(t)
	ev := e.ctd.Subscribe(t)

	e.run(t, runtimePlaceholder, "t1")
	if pid, status := e.taskStatus(t, "t1"); pid != "0" || status != "RUNNING" {
		t.Fatalf("ctr task ls: t1 pid %q status %q, want 0 RUNNING", pid, status)
	}
	waitEvent(t, ev, "/tasks/start", "t1")

	e.ctr(t, "task", "kill", "t1")
	if exit := waitEvent(t, ev, "/tasks/exit", "t1"); exit.ExitStatus != 0 {
		t.Errorf("exit status %d, want 0", exit.ExitStatus)
	}
	if _, status := e.taskStatus(t, "t1"); status != "STOPPED" {
		t.Errorf("after kill: status %q, want STOPPED", status)
	}
	e.ctr(t, "task", "delete", "t1")
	waitEvent(t, ev, "/tasks/delete", "t1")
	if got, want := strings.Join(ev.Topics("t1"), " "), "/tasks/create /tasks/start /tasks/exit /tasks/delete"; got != want {
		t.Errorf("task events %q, want %q", got, want)
	}

	e.waitAgent(t, shimapitest.MethodShutdown, "t1")
	calls := e.agent.CallsFor("t1")
	if got, want := shimapitest.Methods(calls), "Create Start Delete Shutdown"; got != want {
		t.Fatalf("agent saw %q, want %q", got, want)
	}
	for _, c := range calls {
		id := c.Identity
		if id.GetNamespace() != containerdtest.Namespace || id.GetPoolName() != "placeholder-node-a" || id.GetSandbox() || id.GetPodName() != "" {
			t.Errorf("%s carried identity %v", c.Method, id)
		}
	}
	e.noShimsLeft(t)
	e.ctr(t, "container", "rm", "t1")
}

// An attached `ctr run` waits on the task (Task API Wait): it returns with the task's exit
// status, 0, when the task is killed. Attached, the task also has stdio fifos, which the
// shim must open and close for ctr to finish.
func TestWaitReturnsOnKill(t *testing.T) {
	e := setUp(t)
	run := exec.Command(e.ctd.Tool("ctr"), "-a", e.ctd.Address, "-n", containerdtest.Namespace,
		"run", "--runtime", runtimePlaceholder, image.Name, "t2")
	out := &strings.Builder{}
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() { _ = run.Process.Kill() })
	e.waitAgent(t, shimapitest.MethodStart, "t2")

	e.ctr(t, "task", "kill", "--signal", "SIGTERM", "t2")
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("ctr run ended with %v, want exit status 0\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("ctr run still waiting 30s after the kill\n%s", out)
	}
	// Attached ctr run deletes the task itself.
	e.waitAgent(t, shimapitest.MethodShutdown, "t2")
	e.noShimsLeft(t)
}

// SIGTERM to a shim (its shutdown without a Shutdown call) stops its tasks with status 0:
// the exit reaches containerd before the shim is gone, and the agent hears of it.
func TestWaitReturnsOnShutdown(t *testing.T) {
	e := setUp(t)
	ev := e.ctd.Subscribe(t)
	e.run(t, runtimePlaceholder, "t3")
	e.waitAgent(t, shimapitest.MethodStart, "t3")
	m := e.ctd.Mark()

	if err := syscall.Kill(e.onlyShim(t), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := waitEvent(t, ev, "/tasks/exit", "t3"); exit.ExitStatus != 0 {
		t.Errorf("first exit event after the shim's shutdown has status %d, want 0", exit.ExitStatus)
	}
	e.waitAgent(t, shimapitest.MethodShutdown, "t3")
	var sd *v1.ShutdownRequest
	for _, c := range e.agent.CallsFor("t3") {
		if c.Method == shimapitest.MethodShutdown {
			sd = c.Request.(*v1.ShutdownRequest)
		}
	}
	if !sd.GetNow() {
		t.Errorf("Shutdown %v does not say the task was still there (now)", sd)
	}
	e.noShimsLeft(t)
	if p := e.ctd.ProblemsSince(m); len(p) > 0 {
		t.Logf("containerd logged (expected: its view of a shim that went away):\n%s", strings.Join(p, "\n"))
	}
	if _, status := e.taskStatus(t, "t3"); status == "RUNNING" {
		t.Errorf("task still RUNNING after its shim shut down")
	}
}

// Restarting containerd while a placeholder task runs: the shim outlives it, containerd
// reconnects, the task is still RUNNING and stops normally. The agent is not told twice.
func TestReconnectAfterContainerdRestart(t *testing.T) {
	e := setUp(t)
	e.run(t, runtimePlaceholder, "t4")
	e.waitAgent(t, shimapitest.MethodStart, "t4")
	shim := e.onlyShim(t)

	e.ctd.Restart()
	if _, status := e.taskStatus(t, "t4"); status != "RUNNING" {
		t.Fatalf("after the restart: status %q, want RUNNING", status)
	}
	if again := e.onlyShim(t); again != shim {
		t.Fatalf("shim pid %d after the restart, was %d", again, shim)
	}

	ev := e.ctd.Subscribe(t)
	e.ctr(t, "task", "kill", "t4")
	if exit := waitEvent(t, ev, "/tasks/exit", "t4"); exit.ExitStatus != 0 {
		t.Errorf("exit status %d, want 0", exit.ExitStatus)
	}
	e.ctr(t, "task", "delete", "t4")
	e.waitAgent(t, shimapitest.MethodShutdown, "t4")
	if got, want := shimapitest.Methods(e.agent.CallsFor("t4")), "Create Start Delete Shutdown"; got != want {
		t.Errorf("agent saw %q, want %q", got, want)
	}
	e.noShimsLeft(t)
}

// A shim killed with SIGKILL: containerd reports the task exited (the delete action's
// status, 137); the agent's state is untouched, and the next Create of the container
// re-aligns it.
func TestShimKilled(t *testing.T) {
	e := setUp(t)
	ev := e.ctd.Subscribe(t)
	e.run(t, runtimePlaceholder, "t5")
	e.waitAgent(t, shimapitest.MethodStart, "t5")

	if err := syscall.Kill(e.onlyShim(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if exit := waitEvent(t, ev, "/tasks/exit", "t5"); exit.ExitStatus != 137 {
		t.Errorf("exit status %d after the shim was killed, want 137", exit.ExitStatus)
	}
	waitEvent(t, ev, "/tasks/delete", "t5")
	if _, status := e.taskStatus(t, "t5"); status == "RUNNING" {
		t.Fatal("task still RUNNING after its shim was killed")
	}
	task, ok := e.agent.Tasks()["t5"]
	if !ok || !task.Started || task.Creates != 1 {
		t.Fatalf("agent's view of t5 after the crash = %+v (present %v), want it as it was: started, one Create", task, ok)
	}
	if got := shimapitest.Methods(e.agent.CallsFor("t5")); got != "Create Start" {
		t.Fatalf("agent was told %q by a dead shim", got)
	}

	// The container is still there: its next task re-aligns the agent.
	e.ctr(t, "task", "start", "-d", "t5")
	e.waitAgent(t, shimapitest.MethodStart, "t5")
	if task := e.agent.Tasks()["t5"]; !task.Started || task.Creates != 2 {
		t.Errorf("agent's view after the new task = %+v, want started, second Create", task)
	}
	e.ctr(t, "task", "kill", "t5")
	waitEvent(t, ev, "/tasks/exit", "t5")
	e.ctr(t, "task", "delete", "t5")
	e.noShimsLeft(t)
}

// With the agent down, creating a task fails after the shim's short retry with an error
// that names the agent's socket and says kubelet will retry; once the agent is back, the
// same container starts.
func TestAgentUnreachable(t *testing.T) {
	e := setUp(t)
	if err := e.agent.Down(); err != nil {
		t.Fatal(err)
	}
	out, err := e.ctrErr(t, "run", "-d", "--runtime", runtimePlaceholder, image.Name, "t6")
	if err == nil {
		t.Fatalf("ctr run succeeded with the agent down:\n%s", out)
	}
	for _, want := range []string{e.agent.Address(), "unreachable", "kubelet will retry"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctr run's error does not say %q:\n%s", want, out)
		}
	}
	if pid, status := e.taskStatus(t, "t6"); status != "" {
		t.Errorf("a task exists after the failed create: pid %s status %s", pid, status)
	}
	e.noShimsLeft(t)

	if err := e.agent.Up(); err != nil {
		t.Fatal(err)
	}
	e.ctr(t, "task", "start", "-d", "t6")
	if _, status := e.taskStatus(t, "t6"); status != "RUNNING" {
		t.Fatalf("with the agent back: status %q, want RUNNING", status)
	}
	if got := shimapitest.Methods(e.agent.CallsFor("t6")); got != "Create Start" {
		t.Errorf("agent saw %q, want Create Start", got)
	}
	e.ctr(t, "task", "kill", "t6")
	e.ctr(t, "task", "delete", "t6")
}

// Faults injected into the task API (the failpoint shim, as containerd's
// containerd-shim-runc-fp-v1): a failed Kill leaves the task running and a retry stops
// it; a failed Start leaves it created, never reported to the agent as started.
func TestFailpoints(t *testing.T) {
	e := setUp(t)
	ev := e.ctd.Subscribe(t)

	t.Run("Kill", func(t *testing.T) {
		e.run(t, runtimeFailpoint, "fk", "--annotation", "io.containerd.runtime.v2.shim.failpoint.Kill=1*error(injected kill failure)")
		out, err := e.ctrErr(t, "task", "kill", "fk")
		if err == nil || !strings.Contains(out, "injected kill failure") {
			t.Fatalf("first kill: %v\n%s", err, out)
		}
		if _, status := e.taskStatus(t, "fk"); status != "RUNNING" {
			t.Fatalf("after the failed kill: %q, want RUNNING", status)
		}
		e.ctr(t, "task", "kill", "fk")
		if exit := waitEvent(t, ev, "/tasks/exit", "fk"); exit.ExitStatus != 0 {
			t.Errorf("exit status %d, want 0", exit.ExitStatus)
		}
		e.ctr(t, "task", "delete", "fk")
		e.waitAgent(t, shimapitest.MethodShutdown, "fk")
		if got := shimapitest.Methods(e.agent.CallsFor("fk")); got != "Create Start Delete Shutdown" {
			t.Errorf("agent saw %q", got)
		}
	})

	t.Run("Start", func(t *testing.T) {
		out, err := e.ctrErr(t, "run", "-d", "--runtime", runtimeFailpoint,
			"--annotation", "io.containerd.runtime.v2.shim.failpoint.Start=1*error(injected start failure)", image.Name, "fs")
		if err == nil || !strings.Contains(out, "injected start failure") {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		if pid, status := e.taskStatus(t, "fs"); pid != "0" || status != "CREATED" {
			t.Fatalf("after the failed start: pid %q status %q, want 0 CREATED", pid, status)
		}
		if task := e.agent.Tasks()["fs"]; task.Started || task.Creates != 1 {
			t.Fatalf("agent's view %+v, want created once and not started", task)
		}
		e.ctr(t, "task", "delete", "fs")
		e.waitAgent(t, shimapitest.MethodShutdown, "fs")
		if _, ok := e.agent.Tasks()["fs"]; ok {
			t.Error("agent still has the deleted task")
		}
		if got := strings.Join(ev.Topics("fs"), " "); got != "/tasks/create /tasks/delete" {
			t.Errorf("task events %q, want create and delete only", got)
		}
	})
	e.noShimsLeft(t)
}
