// Package manager is the placeholder shim's shim.Shim: how containerd starts, finds and
// cleans up a shim process (the "start" and "delete" actions of pkg/shim), as in
// containerd's runc shim (cmd/containerd-shim-runc-v2/manager), minus everything about
// runc and cgroups.
package manager

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/version"

	"github.com/agentcube/sandboxpool/shim/task"
)

// RuntimeName is the runtime type containerd knows the shim by; containerd derives the
// binary name containerd-shim-placeholder-v2 from it.
const RuntimeName = "io.containerd.placeholder.v2"

// BinaryName is the shim's executable, named as containerd derives it from RuntimeName.
var BinaryName = shim.BinaryName(RuntimeName)

// GroupAnnotation puts tasks that carry the same value into one shim process, like
// io.containerd.runc.v2.group for runc. CRI's sandbox ID groups a pod's containers.
const GroupAnnotation = "io.containerd.placeholder.v2.group"

// groupAnnotations are read in order; the first one present names the shim's group.
var groupAnnotations = []string{GroupAnnotation, task.AnnotationSandboxID}

// crashExitStatus is what Stop reports for a task whose shim died without reporting its
// exit (128 + SIGKILL, as the runc shim's fallback).
const crashExitStatus = 128 + int(syscall.SIGKILL)

// NewShimManager returns the shim manager registered as name.
func NewShimManager(name string) shim.Shim {
	return manager{name: name}
}

// Options are the pkg/shim options of the placeholder shim: it starts no processes, so it
// neither becomes a subreaper nor reaps children.
func Options(c *shim.Config) {
	c.NoSubreaper = true
	c.NoReaper = true
}

type manager struct {
	name string
}

func (m manager) Name() string { return m.name }

// Start runs in the short-lived "start" process: it creates (or finds) the socket of the
// shim for the task's group and starts the long-running shim process serving it, then
// tells containerd the address.
func (m manager) Start(ctx context.Context, opts *bootapi.BootstrapParams) (_ *bootapi.BootstrapResult, retErr error) {
	result := &bootapi.BootstrapResult{Version: 3, Protocol: "ttrpc"}
	id := opts.GetInstanceID()

	// The working directory is the task's bundle.
	spec, err := task.ReadSpec(".")
	if err != nil {
		return nil, err
	}
	group := id
	for _, a := range groupAnnotations {
		if g, ok := spec.Annotations[a]; ok && g != "" {
			group = g
			break
		}
	}

	socketDir := opts.GetSocketDir()
	if socketDir == "" {
		socketDir = filepath.Join(defaults.DefaultStateDir, "s")
	}
	address, err := shim.CreateSocketAddress(ctx, socketDir, opts.GetContainerdGrpcAddress(), group, false)
	if err != nil {
		return nil, err
	}
	socket, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return nil, fmt.Errorf("creating the shim socket: %w", err)
		}
		// The group's shim is already serving: the task joins it.
		if shim.CanConnect(address) {
			result.Address = address
			return result, nil
		}
		// A shim that died left its socket behind.
		if err := shim.RemoveSocket(address); err != nil {
			return nil, fmt.Errorf("removing the stale shim socket: %w", err)
		}
		if socket, err = shim.NewSocket(address); err != nil {
			return nil, fmt.Errorf("creating the shim socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			socket.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	f, err := socket.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()

	cmd, err := newCommand(ctx, id, opts.GetContainerdGrpcAddress(), opts.GetLogLevel() <= bootapi.LogLevel_LOG_LEVEL_DEBUG)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f) // fd 3: pkg/shim serves on it
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	go func() { _ = cmd.Wait() }()

	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("adjusting the OOM score of the shim: %w", err)
	}
	result.Address = address
	return result, nil
}

// newCommand is the long-running shim process: this binary, in the bundle directory, in
// its own process group so it outlives containerd restarts.
func newCommand(ctx context.Context, id, containerdAddress string, debug bool) (*exec.Cmd, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	args := []string{"-namespace", ns, "-id", id, "-address", containerdAddress}
	if debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// Stop runs in the "delete" process containerd starts when a shim is gone or failed to
// start. There is nothing to clean up: the task was only ever in the dead shim's memory,
// and the agent keeps its pool state (the next Create re-aligns it). The exit is reported
// as a kill.
func (m manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	return shim.StopStatus{ExitedAt: time.Now(), ExitStatus: crashExitStatus}, nil
}

// Info describes the shim to containerd: the name and the version of the shim library
// (pkg/shim); it takes no runtime options.
func (m manager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	return &types.RuntimeInfo{
		Name:    m.name,
		Version: &types.RuntimeVersion{Version: version.Version, Revision: version.Revision},
	}, nil
}
