package framework

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildBinary builds the main package pkg (e.g. "./cmd/sandboxpool-controller", relative to
// the repository root) into dir and returns the binary's path.
func BuildBinary(root, dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// KubeconfigFor writes a kubeconfig authenticating as name in groups (a client certificate)
// into dir and returns its path, for a component run as its own process.
func (c *ControlPlane) KubeconfigFor(dir, name string, groups ...string) (string, error) {
	u, err := c.Env.AddUser(envtestUser(name, groups...), nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig-"+filepath.Base(filepath.Clean("/"+name)))
	return path, os.WriteFile(path, kc, 0o600)
}

// Process is a component run as a child process; its output is kept for the test log.
type Process struct {
	Name string
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  bytes.Buffer
	done chan struct{}
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is what the process has written to stdout and stderr so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// StartProcess starts bin with args. The process is killed when the test ends, and its
// output is logged if the test failed.
func StartProcess(t testing.TB, name, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.Output())
		}
	})
	return p
}

// Signal sends sig to the process if it still runs.
func (p *Process) Signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop sends sig and waits up to within for the process to exit.
func (p *Process) Stop(sig syscall.Signal, within time.Duration) error {
	p.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s did not exit within %s of %s", p.Name, within, sig)
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
