package nodectltest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/tests/support"
)

// Packages of the binaries the helpers run.
const (
	nodeCtlPackage = "github.com/agentcube/sandboxpool/cmd/node-ctl"
	hogPackage     = "github.com/agentcube/sandboxpool/nodectl/nodectltest/internal/hog"
	loadPackage    = "github.com/agentcube/sandboxpool/hack/load"
	binDirPrefix   = "sandboxpool-nodectltest-"
)

var build struct {
	once sync.Once
	dir  string
	err  error
}

// binary returns the path of the named binary ("node-ctl", "hog" or "load"), building them once
// per test binary with the go command into a temporary directory. Directories left by
// earlier test binaries that are gone are removed then.
func binary(t testing.TB, name string) string {
	t.Helper()
	build.once.Do(func() {
		removeStaleBinDirs()
		dir, err := os.MkdirTemp("", binDirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			build.err = err
			return
		}
		// Build inside this module whatever the test's working directory.
		b := support.GoBuild{Out: dir}
		if _, file, _, ok := runtime.Caller(0); ok {
			b.Dir = filepath.Dir(file)
		}
		if err := b.Run(context.Background(), nodeCtlPackage, hogPackage, loadPackage); err != nil {
			build.err = err
			return
		}
		build.dir = dir
	})
	if build.err != nil {
		t.Fatalf("building the test binaries: %v", build.err)
	}
	return filepath.Join(build.dir, name)
}

// removeStaleBinDirs removes binary directories whose test binary (the pid in the name)
// no longer runs. A test binary cannot remove its own: nothing runs after the last test
// without a TestMain.
func removeStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), binDirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// Options configure Start.
type Options struct {
	// Zone is passed as --zone.
	Zone string
	// CgroupPath is passed as --cgroup-path; empty: a fresh CgroupPath(t).
	CgroupPath string
	// Config, when set, is written before node-ctl starts, so it applies it at start.
	Config *api.Config
	// Args are extra flags.
	Args []string
	// Binary is the node-ctl to run; empty: cmd/node-ctl, built once per test binary.
	// Another implementation of the contract with the same flags can be tested this way.
	Binary string
}

// Process is a real node-ctl process: the cmd/node-ctl binary on real cgroups, talking
// the contract on a unix socket. Its methods fail t on error; they are not safe for
// concurrent use.
type Process struct {
	// SocketPath, ConfigPath and CgroupPath are what node-ctl was started with.
	SocketPath, ConfigPath, CgroupPath string
	// Client talks to the process.
	Client *client.Client

	t    testing.TB
	proc *support.Proc
}

// Start builds (once) and starts the real node-ctl on real cgroups and waits until it is
// healthy. It skips t unless RequireCgroups passes. t's cleanup stops the process
// gracefully, shows its log if t failed, and deletes the cgroup.
func Start(t testing.TB, opts Options) *Process {
	t.Helper()
	RequireCgroups(t)
	bin := opts.Binary
	if bin == "" {
		bin = binary(t, "node-ctl")
	}
	if opts.CgroupPath == "" {
		opts.CgroupPath = CgroupPath(t)
	}
	dir := support.ShortTempDir(t)
	p := &Process{
		SocketPath: filepath.Join(dir, "nc.sock"),
		ConfigPath: filepath.Join(dir, "node-ctl.json"),
		CgroupPath: opts.CgroupPath,
		t:          t,
	}
	p.Client = client.New(p.SocketPath)
	p.proc = support.NewProc("node-ctl", filepath.Join(dir, "node-ctl.log"), bin, append([]string{
		"--socket=" + p.SocketPath,
		"--config=" + p.ConfigPath,
		"--cgroup-path=" + p.CgroupPath,
		"--zone=" + opts.Zone,
		"--log-level=DEBUG",
	}, opts.Args...))
	// Do not outlive a test binary that crashes or times out.
	p.proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if opts.Config != nil {
		WriteConfig(t, p.ConfigPath, *opts.Config)
	}
	t.Cleanup(func() {
		if p.proc.Running() {
			p.Stop()
		}
		if t.Failed() {
			t.Logf("node-ctl log (%s):\n%s", p.proc.Log, p.Logs())
		}
	})
	p.Start()
	return p
}

// Start starts the process again after Stop or Kill and waits until it is healthy.
func (p *Process) Start() {
	p.t.Helper()
	if err := p.proc.Start(); err != nil {
		p.t.Fatal(err)
	}
	WaitHealthy(p.t, p.Client, p.proc.Exited())
}

// Pid is the running process's pid.
func (p *Process) Pid() int {
	p.t.Helper()
	if !p.proc.Running() {
		p.t.Fatalf("node-ctl is not running")
	}
	return p.proc.Pid()
}

// Signal sends sig to the running process.
func (p *Process) Signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.Pid(), sig); err != nil {
		p.t.Fatalf("sending %v to node-ctl: %v", sig, err)
	}
}

// Stop sends SIGTERM and waits for a clean exit, as systemd stops the unit.
func (p *Process) Stop() {
	p.t.Helper()
	p.Signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		p.t.Errorf("node-ctl did not exit cleanly on SIGTERM: %v", err)
	}
}

// Kill sends SIGKILL and waits for the process to be gone: a crash, leaving its socket file
// behind.
func (p *Process) Kill() {
	p.t.Helper()
	p.Signal(syscall.SIGKILL)
	var exitErr *exec.ExitError
	if err := p.wait(); !errors.As(err, &exitErr) {
		p.t.Errorf("node-ctl was not killed: %v", err)
	}
}

// Restart is Stop then Start: the contract's restart (SIGTERM, the unit restarts it).
func (p *Process) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

// WriteConfig writes cfg to the process's config file (it does not reload).
func (p *Process) WriteConfig(cfg api.Config) {
	p.t.Helper()
	WriteConfig(p.t, p.ConfigPath, cfg)
}

// Logs returns everything the process (all its runs) logged.
func (p *Process) Logs() string {
	return strings.TrimSpace(p.proc.Output())
}

// wait waits for the running process to exit and returns cmd.Wait's error.
func (p *Process) wait() error {
	p.t.Helper()
	select {
	case <-p.proc.Exited():
	case <-time.After(processTimeout):
		pid := p.proc.Pid()
		_ = p.proc.Kill()
		p.t.Fatalf("node-ctl (pid %d) did not exit within %v", pid, processTimeout)
	}
	return p.proc.WaitErr()
}
