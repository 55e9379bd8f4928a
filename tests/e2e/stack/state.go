package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// State is what a stack run in the background leaves in its state file, so that another
// process can use it and tear it down: where things are, and every process it started
// (identified by pid and start time, so a reused pid is never signalled).
type State struct {
	// Runner is the process that runs the stack (hack/demo's serve command, a test binary).
	Runner ProcessRecord `json:"runner"`
	// Ready is set once everything runs and the node is Ready.
	Ready bool `json:"ready"`
	// Processes are the components, the control plane's included.
	Processes []ProcessRecord `json:"processes"`
	// Dir is the stack's directory; Kubeconfig a cluster-admin kubeconfig; LogDir the logs.
	Dir        string `json:"dir"`
	Kubeconfig string `json:"kubeconfig"`
	LogDir     string `json:"logDir"`
	NodeName   string `json:"nodeName"`
	// ManifestDir is kubelet's staticPodPath; NodeCtlSocket node-ctl's socket.
	ManifestDir   string `json:"manifestDir"`
	NodeCtlSocket string `json:"nodeCtlSocket"`
	// InstallDir holds the kustomization the cluster half was applied from; PodLogDir the
	// Pods' logs (kubelet's podLogsDir).
	InstallDir string `json:"installDir"`
	PodLogDir  string `json:"podLogDir"`
	// Cgroups, Bridge and TempDirs are what the stack made outside Dir.
	Cgroups  []string `json:"cgroups"`
	Bridge   string   `json:"bridge"`
	TempDirs []string `json:"tempDirs"`
	// KubeProxy, when set, is the kube-proxy binary whose iptables rules the stack leaves
	// on the host until it stops (`kube-proxy --cleanup` removes them).
	KubeProxy string `json:"kubeProxy,omitempty"`
}

// State describes the running stack; runner is the process running it.
func (s *Stack) State() State {
	st := State{
		Runner: RecordOf("runner", os.Getpid()), Ready: s.ready, Dir: s.Opts.Dir, Kubeconfig: s.Kubeconfig, LogDir: s.LogDir,
		NodeName: s.Opts.NodeName, ManifestDir: s.paths.manifests, NodeCtlSocket: s.paths.nodeCtlSock,
		InstallDir: s.InstallDir(), PodLogDir: s.paths.podLogs,
		Cgroups: []string{s.PodRoot}, Bridge: s.Network.Bridge, TempDirs: s.envtestDirs,
	}
	if s.Opts.Tools.KubeAssets != "" {
		st.KubeProxy = s.kubeProxyBin()
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		for _, pid := range childrenNamed(name) {
			st.Processes = append(st.Processes, RecordOf(name, pid))
		}
	}
	for _, p := range []*Proc{s.ControllerManager, s.Scheduler, s.Containerd, unitProc(s.NodeCtl), unitProc(s.Agent), s.Kubelet, unitProc(s.KubeProxy)} {
		if p != nil && p.Running() {
			st.Processes = append(st.Processes, RecordOf(p.Name, p.Pid()))
		}
	}
	return st
}

// StateFile is the state file's name in a stack's directory. Start writes it before it
// creates anything outside the directory and again once everything runs; a runner that
// changes what runs (node-ctl restarted) writes it again with WriteStateFile.
const StateFile = "state.json"

// WriteStateFile writes the stack's current state to Dir/StateFile.
func (s *Stack) WriteStateFile() error {
	return WriteState(filepath.Join(s.Opts.Dir, StateFile), s.State())
}

// CleanStale tears down the stacks below the directories matching pattern (a glob, e.g.
// "/tmp/spe2e*") whose runner is gone — a test binary that crashed or was killed before it
// could stop its stack — and says what it did through logf. Stacks whose runner lives are
// left alone.
func CleanStale(pattern string, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(pattern)
	for _, d := range dirs {
		st, err := ReadState(filepath.Join(d, StateFile))
		if err != nil || st.Runner.Alive() || st.Dir != d {
			continue
		}
		logf("removing the stale stack in %s (runner pid %d is gone)", d, st.Runner.Pid)
		if err := TearDown(st, 0, logf); err != nil {
			logf("removing %s: %v", d, err)
		}
	}
}

// WriteState writes st to path atomically.
func WriteState(path string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadState reads a state file.
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, nil
}

// TearDown stops what st records and removes what it made: it asks the runner to stop
// (SIGTERM: it stops the components in order), waits up to grace, then SIGKILLs every
// recorded process that is still the same process, and the placeholder and runc shims of
// the stack's containerd; then it unmounts what is left below Dir, removes the cgroups, the
// bridge, kube-proxy's iptables rules, the control plane's temporary directories and Dir.
// logf reports each step.
func TearDown(st State, grace time.Duration, logf func(string, ...any)) error {
	if st.Runner.Alive() {
		logf("stopping the stack (pid %d)", st.Runner.Pid)
		_ = st.Runner.Signal(syscall.SIGTERM)
		_ = waitGone(st.Runner, grace) // then it is killed below
	}
	var errs []error
	for _, r := range append([]ProcessRecord{st.Runner}, st.Processes...) {
		if r.Alive() {
			logf("killing %s (pid %d)", r.Name, r.Pid)
			if err := r.Signal(syscall.SIGKILL); err != nil {
				errs = append(errs, fmt.Errorf("killing %s (pid %d): %w", r.Name, r.Pid, err))
			}
		}
	}
	if st.Dir != "" {
		for pid := range containerdtest.ShimsBelow(st.Dir) {
			logf("killing shim pid %d", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, r := range st.Processes {
		if waitGone(r, 10*time.Second) != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d) survived SIGKILL", r.Name, r.Pid))
		}
	}
	if st.Dir != "" {
		unmountAll(st.Dir)
	}
	for _, cg := range st.Cgroups {
		errs = append(errs, removeCgroup(cg))
	}
	if st.Bridge != "" {
		deleteLink(st.Bridge)
	}
	if st.KubeProxy != "" {
		logf("removing kube-proxy's iptables rules (kube-proxy --cleanup)")
		errs = append(errs, cleanupKubeProxy(st.KubeProxy))
	}
	for _, d := range st.TempDirs {
		if d != "" && filepath.IsAbs(d) {
			_ = os.RemoveAll(d)
		}
	}
	if st.Dir != "" {
		if err := os.RemoveAll(st.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unitProc is u's process, nil without a unit.
func unitProc(u *Unit) *Proc {
	if u == nil {
		return nil
	}
	return u.Proc
}

// waitGone waits up to timeout for the recorded process to be gone.
func waitGone(r ProcessRecord, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(context.Background(), pollInterval, timeout, true, func(context.Context) (bool, error) {
		return !r.Alive(), nil
	})
}
