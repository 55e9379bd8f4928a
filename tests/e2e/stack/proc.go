package stack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentcube/sandboxpool/tests/support"
)

// Proc is one component of the stack run as a child process, with its output appended to
// <LogDir>/<Name>.log.
type Proc = support.Proc

// newProc is the component name: its own process group, so a terminal's ^C reaches the
// runner only, which stops the components in order; killed when the runner dies (a crashed
// test binary), so no component outlives it (TearDown then removes the rest).
func newProc(name, logDir, bin string, args []string, env ...string) *Proc {
	p := support.NewProc(name, filepath.Join(logDir, name+".log"), bin, args)
	p.Env = env
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return p
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
