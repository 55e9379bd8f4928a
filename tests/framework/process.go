package framework

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

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

// KillAPIServer kills kube-apiserver (SIGKILL: no graceful shutdown, as a crash or a lost
// machine would) and returns a function that starts it again with the same command line —
// port, certificates, etcd — and waits until it serves. etcd keeps running, so nothing is
// lost. The restarted process is stopped with the control plane.
func (c *ControlPlane) KillAPIServer() (restart func() error, err error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, err
	}
	pid, argv, err := findProcess("kube-apiserver", "--secure-port="+u.Port())
	if err != nil {
		return nil, err
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, err
	}
	if err := proc.Kill(); err != nil {
		return nil, fmt.Errorf("killing kube-apiserver %d: %w", pid, err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return syscall.Kill(pid, 0) != nil, nil
	}); err != nil {
		return nil, fmt.Errorf("kube-apiserver %d still alive 30 s after SIGKILL: %w", pid, err)
	}
	return func() error {
		next := exec.Command(argv[0], argv[1:]...)
		if err := next.Start(); err != nil {
			return fmt.Errorf("restarting kube-apiserver: %w", err)
		}
		go func() { _ = next.Wait() }()
		c.restarted = append(c.restarted, next.Process)
		var last error
		if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, _, last = c.Kubectl(ctx, nil, "get", "--raw", "/readyz")
			return last == nil, nil
		}); err != nil {
			return fmt.Errorf("kube-apiserver not ready a minute after restart: %w", errors.Join(err, last))
		}
		return nil
	}, nil
}

// findProcess finds the process whose executable's base name is name and whose command line
// has the argument arg, and returns its pid and command line.
func findProcess(name, arg string) (int, []string, error) {
	pid, argv, err := scanProcesses(name, func(args []string) bool { return slices.Contains(args, arg) })
	if err != nil {
		return 0, nil, fmt.Errorf("no %s process with %s: %w", name, arg, err)
	}
	return pid, argv, nil
}

// scanProcesses returns the first process in /proc whose executable's base name is name
// and whose arguments (without argv[0]) satisfy match, with its command line.
func scanProcesses(name string, match func(args []string) bool) (int, []string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(argv[0]) == name && match(argv[1:]) {
			return pid, argv, nil
		}
	}
	return 0, nil, os.ErrNotExist
}
