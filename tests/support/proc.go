package support

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a component run as a child process, with its output appended to a log file. It
// can be stopped and started again (each run appends to the same log). Its methods are safe
// for concurrent use.
type Proc struct {
	// Name names the component in errors.
	Name string
	// Log is the log file's path.
	Log string
	// Env is added to this process's environment for the child.
	Env []string
	// SysProcAttr, when set, is the child's (process group, parent-death signal).
	SysProcAttr *syscall.SysProcAttr

	mu      sync.Mutex // guards bin, args, cmd, exited and waitErr
	bin     string
	args    []string
	cmd     *exec.Cmd     // nil before the first start
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error         // cmd.Wait's result, set before exited is closed
}

// NewProc is a process that runs bin with args and logs to log; it does not start it.
func NewProc(name, log, bin string, args []string) *Proc {
	return &Proc{Name: name, Log: log, bin: bin, args: args}
}

// StartProcess starts bin with args for a test, logging into the test's temporary
// directory. The process is killed when the test ends, and its output is logged if the test
// failed.
func StartProcess(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := NewProc(name, filepath.Join(t.TempDir(), filepath.Base(name)+".log"), bin, args)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.Output())
		}
	})
	return p
}

// SetCommand sets the command line of the next start.
func (p *Proc) SetCommand(bin string, args []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bin, p.args = bin, args
}

// Bin is the executable of the next start.
func (p *Proc) Bin() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bin
}

// Start starts the process (again, after it exited).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.exited) {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	fmt.Fprintf(logFile, "=== %s starting %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = p.SysProcAttr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.waitErr = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Running reports whether the process has been started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.exited)
}

// Pid is the process id of the current (or last) run, 0 before the first start.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current run has exited.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.exited
}

// WaitErr is how the last run ended (exec.Cmd.Wait's error), nil while it runs.
func (p *Proc) WaitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the running process; it does nothing when the process is not running.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.exited) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM, waits up to grace for the exit, then SIGKILLs and waits.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited():
		return nil
	case <-time.After(grace):
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.Name, grace)
}

// Kill sends SIGKILL and waits for the process to be gone: a crash.
func (p *Proc) Kill() error {
	if !p.Running() {
		return nil
	}
	p.Signal(syscall.SIGKILL)
	select {
	case <-p.Exited():
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Pid())
	}
}

// Restart stops the process gracefully and starts it again.
func (p *Proc) Restart(grace time.Duration) error {
	if err := p.Stop(grace); err != nil {
		return err
	}
	return p.Start()
}

// Output is everything the process (all its runs) has logged so far.
func (p *Proc) Output() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.Log, err)
	}
	return string(b)
}

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string { return Tail(p.Log, n) }

// Tail is the last n lines of the file at path.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
