package nodectltest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/cgroup"
)

// userHZ is the unit of the cpu times in /proc/<pid>/stat: fixed at 100 by the kernel's ABI.
const userHZ = 100

// Burner is a real process burning cpu in a cgroup: a sandbox that wants more cpu than its
// slice holds (hack/load's `load cpu`).
type Burner struct {
	// Pid is the burner's pid.
	Pid int
	// Threads is how many threads it keeps busy.
	Threads int

	kill func() // kills it and waits for it
}

// StartBurner starts a burner of threads threads, moves it into the cgroup at cgroupPath
// (created if missing) and waits until it burns there. It skips t unless RequireCgroups
// passes. t's cleanup kills it.
func StartBurner(t testing.TB, cgroupPath string, threads int) *Burner {
	t.Helper()
	RequireCgroups(t)
	cg, err := cgroup.Open(cgroupPath)
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmd := exec.Command(binary(t, "load"), "cpu", strconv.Itoa(threads))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("burner stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the burner: %v", err)
	}
	exited := make(chan struct{})
	burning := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "burning") {
				close(burning)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(kill)
	// Moving the process moves all its threads, and those it starts later are born there.
	if err := cg.AddProcess(cmd.Process.Pid); err != nil {
		t.Fatalf("%v", err)
	}
	select {
	case <-burning:
	case <-exited:
		t.Fatalf("burner %d exited before it burned", cmd.Process.Pid)
	case <-time.After(processTimeout):
		t.Fatalf("burner %d did not start burning within %v", cmd.Process.Pid, processTimeout)
	}
	return &Burner{Pid: cmd.Process.Pid, Threads: threads, kill: kill}
}

// Stop kills the burner and waits until it is gone.
func (b *Burner) Stop() { b.kill() }

// CPUTime is the cpu time the burner has used so far.
func (b *Burner) CPUTime() (time.Duration, error) { return ProcessCPUTime(b.Pid) }

// ProcessCPUTime is the cpu time (user and system, all threads) the process pid has used,
// from /proc/<pid>/stat, in steps of 10 ms.
func ProcessCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := statCPUTime(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// statCPUTime is utime + stime (fields 14 and 15) of a /proc/<pid>/stat line.
func statCPUTime(stat string) (time.Duration, error) {
	// The command name, field 2, is in parentheses and may hold spaces and parentheses:
	// count from the last ')'.
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state), so utime and stime are f[11] and f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("cpu time %q: want a count of ticks", v)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
