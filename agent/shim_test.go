package agent

import (
	"os/exec"
	"testing"
	"time"
)

// TestWatchExit: the watch of a process reports its exit at once, and not the exit of a
// process whose watch was stopped.
func TestWatchExit(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	watched, stopped := start(), start()
	exited := make(chan int, 2)
	for _, cmd := range []*exec.Cmd{watched, stopped} {
		st, err := processStartTime(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		stop, err := watchExit(pid, st, func() { exited <- pid })
		if err != nil {
			t.Fatal(err)
		}
		if cmd == stopped {
			stop()
		}
	}
	for _, cmd := range []*exec.Cmd{stopped, watched} {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	select {
	case pid := <-exited:
		if pid != watched.Process.Pid {
			t.Fatalf("exit of %d reported, want only %d's", pid, watched.Process.Pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exit of the watched process was not reported")
	}
	select {
	case pid := <-exited:
		t.Fatalf("exit of %d reported after its watch was stopped", pid)
	default:
	}
	// A process gone before the watch starts is reported too.
	gone := start()
	st, _ := processStartTime(gone.Process.Pid)
	_ = gone.Process.Kill()
	_ = gone.Wait()
	if _, err := watchExit(gone.Process.Pid, st, func() { exited <- gone.Process.Pid }); err == nil {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Fatal("the exit of a process gone before the watch was not reported")
		}
	}
}
