package nodectltest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/cgroup"
)

// hogReady is the line the hog writes once its memory is touched.
const hogReady = "allocated"

// Hog is a real process holding anonymous memory in a cgroup, charged to that cgroup.
type Hog struct {
	// Pid is the hog's pid.
	Pid int
	// MiB is the memory it was asked to hold.
	MiB int

	t         testing.TB
	stdin     io.WriteCloser
	allocated chan struct{} // closed when the hog reports its memory touched
	exited    chan struct{} // closed when the hog has been waited for
	state     *os.ProcessState
	stderr    *syncBuffer
}

// StartHog starts a hog, moves it into the cgroup at cgroupPath (created if missing) and
// then lets it map and touch mib MiB, so that all of it is charged to that cgroup (cgroup
// v1 does not move memory charged before a move). It does not wait for the memory: see
// WaitAllocated. It skips t unless RequireCgroups passes. t's cleanup kills the hog.
func StartHog(t testing.TB, cgroupPath string, mib int) *Hog {
	t.Helper()
	RequireCgroups(t)
	bin := binary(t, "hog")
	cg, err := cgroup.Open(cgroupPath)
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmd := exec.Command(bin, strconv.Itoa(mib))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("hog stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("hog stdout: %v", err)
	}
	h := &Hog{MiB: mib, t: t, stdin: stdin, allocated: make(chan struct{}),
		exited: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the hog: %v", err)
	}
	h.Pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == hogReady {
				close(h.allocated)
			}
		}
		_ = cmd.Wait() // the exit status is in ProcessState
		h.state = cmd.ProcessState
		close(h.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.exited
	})
	if err := cg.AddProcess(h.Pid); err != nil {
		t.Fatalf("%v", err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("letting the hog allocate: %v", err)
	}
	return h
}

// WaitAllocated waits until the hog holds all its memory. It returns an error when the
// hog exited first (e.g. OOM-killed: see OOMKilled) or timeout passed.
func (h *Hog) WaitAllocated(timeout time.Duration) error {
	select {
	case <-h.allocated:
		return nil
	case <-h.exited:
		return fmt.Errorf("hog %d (%d MiB) exited before holding its memory: %v %s",
			h.Pid, h.MiB, h.state, h.stderr.String())
	case <-time.After(timeout):
		return fmt.Errorf("hog %d (%d MiB) did not allocate within %v", h.Pid, h.MiB, timeout)
	}
}

// WaitExit waits until the hog has exited and returns its state.
func (h *Hog) WaitExit(timeout time.Duration) (*os.ProcessState, error) {
	select {
	case <-h.exited:
		return h.state, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("hog %d is still running after %v", h.Pid, timeout)
	}
}

// Running reports whether the hog has not exited.
func (h *Hog) Running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// OOMKilled reports whether the hog has exited killed by SIGKILL, which for a hog nobody
// killed means the kernel's OOM killer.
func (h *Hog) OOMKilled() bool {
	select {
	case <-h.exited:
	default:
		return false
	}
	ws, ok := h.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Release lets the hog free its memory and exit, and waits for it.
func (h *Hog) Release() {
	h.t.Helper()
	_ = h.stdin.Close()
	state, err := h.WaitExit(processTimeout)
	if err != nil {
		h.t.Fatalf("%v", err)
	}
	if !state.Success() {
		h.t.Errorf("hog %d exited with %v: %s", h.Pid, state, h.stderr.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec and a reader.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
