package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one component of the stack run as a child process, with its output appended to
// a log file. Its methods are safe for concurrent use.
type Proc struct {
	// Name names the component (and its log file, <LogDir>/<Name>.log).
	Name string
	// Log is the log file's path.
	Log string

	env []string

	mu      sync.Mutex // guards bin, args, cmd and exited
	bin     string
	args    []string
	cmd     *exec.Cmd     // nil before the first start
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error         // cmd.Wait's result, set before exited is closed
}

func newProc(name, logDir, bin string, args []string, env ...string) *Proc {
	return &Proc{Name: name, Log: filepath.Join(logDir, name+".log"), bin: bin, args: args, env: env}
}

// setCommand sets the command line of the next start.
func (p *Proc) setCommand(bin string, args []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bin, p.args = bin, args
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
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so a terminal's ^C reaches the runner only, which stops the
	// components in order; killed when the runner dies (a crashed test binary), so no
	// component outlives it (TearDown then removes the rest).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
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
	p.Signal(syscall.SIGKILL)
	select {
	case <-p.Exited():
		return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.Name, grace)
	case <-time.After(15 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Pid())
	}
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

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string { return tail(p.Log, n) }

// Record is the process as the state file keeps it.
func (p *Proc) Record() ProcessRecord {
	return RecordOf(p.Name, p.Pid())
}

func tail(path string, n int) string {
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

// ProcessRecord identifies a process across PID reuse: its pid with the start time the
// kernel gives it (field 22 of /proc/<pid>/stat, in clock ticks since boot).
type ProcessRecord struct {
	Name      string `json:"name"`
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Exe       string `json:"exe,omitempty"`
}

// RecordOf records the running process pid, under name, with its start time and executable.
func RecordOf(name string, pid int) ProcessRecord {
	r := ProcessRecord{Name: name, Pid: pid}
	if pid > 0 {
		r.StartTime, _ = startTime(pid)
		r.Exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	}
	return r
}

// Alive reports whether the recorded process still runs (same pid and start time).
func (r ProcessRecord) Alive() bool {
	if r.Pid <= 0 {
		return false
	}
	st, err := startTime(r.Pid)
	return err == nil && st == r.StartTime && !zombie(r.Pid)
}

// Signal sends sig to the recorded process if it is still the same process.
func (r ProcessRecord) Signal(sig syscall.Signal) error {
	if !r.Alive() {
		return nil
	}
	return syscall.Kill(r.Pid, sig)
}

// startTime reads a process's start time from /proc/<pid>/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unparseable stat")
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return 0, errors.New("short stat")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// childrenNamed returns the pids of this process's children whose executable's base name
// is name (the control plane envtest starts: etcd, kube-apiserver).
func childrenNamed(name string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var ppid, comm string
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				ppid = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "Name:"); ok {
				comm = strings.TrimSpace(v)
			}
		}
		// comm is truncated to 15 characters: compare the executable instead.
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if ppid == self && (filepath.Base(exe) == name || comm == name) {
			out = append(out, pid)
		}
	}
	return out
}
