// Package demo is `make demo` and `make demo-down`: the one-node cluster of tests/e2e/stack
// run in the background by a detached `demo serve` — the cluster half applied from deploy/
// with the images of `make images`, the node half installed by deploy/node/install.sh —
// the examples applied, the pool and the cluster half's Pods shown.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
)

// Options of the three commands.
type Options struct {
	// Dir holds the stack: state file, kubeconfig, logs, the node's files.
	Dir string
	// Bin holds the node's binaries (make demo builds them into bin/).
	Bin string
	// Images holds the controller's and the webhook's image archives (make images).
	Images string
	// Examples are applied by up (globs, relative to the repository root).
	Examples string
	// NodeName and NodeLabel: the demo node, labelled so that examples/class-demo.yaml
	// selects it.
	NodeName  string
	NodeLabel string
	// Timeout bounds up's wait for a Ready pool.
	Timeout time.Duration
	// NodeRestriction runs the API server with the NodeRestriction admission plugin.
	NodeRestriction bool
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		Dir: "/tmp/sandboxpool-demo", Bin: "bin", Images: "_output/images", Examples: "examples/class-*.yaml",
		NodeName: "demo-node", NodeLabel: "sandbox.agentcube.io/pool=demo", Timeout: 3 * time.Minute,
		NodeRestriction: true,
	}
}

// AddFlags binds the options to flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Dir, "dir", o.Dir, "directory of the demo stack (short: unix socket paths are limited to 108 bytes)")
	fs.StringVar(&o.Bin, "bin", o.Bin, "directory with placeholder-agent, node-ctl and containerd-shim-placeholder-v2 (the node half)")
	fs.StringVar(&o.Images, "images", o.Images, "directory with the controller's and the webhook's image archives (make images)")
	fs.StringVar(&o.Examples, "examples", o.Examples, "space-separated globs of the manifests up applies")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of the demo node")
	fs.StringVar(&o.NodeLabel, "node-label", o.NodeLabel, "label (key=value) the demo node registers with")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long up waits for the pool to be Ready")
	fs.BoolVar(&o.NodeRestriction, "node-restriction", o.NodeRestriction, "run the API server with the NodeRestriction admission plugin, as production clusters do (the agent then renews its Leases as its per-node service account, --lease-kubeconfig)")
}

func (o Options) statePath() string { return filepath.Join(o.Dir, stack.StateFile) }
func (o Options) runnerLog() string { return filepath.Join(o.Dir, "logs", "stack.log") }

// Serve runs the stack in the foreground until SIGTERM or SIGINT, keeping the state file
// current (node-ctl's PID changes when it is restarted).
func Serve(o Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	bin, err := filepath.Abs(o.Bin)
	if err != nil {
		return err
	}
	images, err := filepath.Abs(o.Images)
	if err != nil {
		return err
	}
	key, value, _ := strings.Cut(o.NodeLabel, "=")
	logf := func(format string, args ...any) {
		fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	unlock, err := stack.LockMachine(logf)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := stack.Start(ctx, stack.Options{
		Dir: o.Dir, NodeName: o.NodeName, NodeLabels: map[string]string{key: value}, Zone: "demo-zone-a",
		Tools: stack.ToolsFromEnv(), Bin: bin, Images: images, Timers: stack.DefaultTimers(), NodeRestriction: o.NodeRestriction, Logf: logf,
	})
	if err != nil {
		return err
	}
	last := s.State()
	logf("stack running; state in %s", o.statePath())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("stopping the stack")
			err := s.Stop()
			logf("stack stopped")
			return err
		case <-tick.C:
			if st := s.State(); !reflect.DeepEqual(st.Processes, last.Processes) {
				last = st
				_ = s.WriteStateFile()
			}
		}
	}
}

// Down tears down what the state file records.
func Down(o Options) error {
	st, err := stack.ReadState(o.statePath())
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no demo running (no %s)\n", o.statePath())
		return nil
	}
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	if err := stack.TearDown(st, time.Minute, logf); err != nil {
		return err
	}
	fmt.Printf("demo stopped; removed %s\n", st.Dir)
	return nil
}

// Up starts the stack in the background (or finds it running), applies the examples,
// waits until the node's pool is Ready and shows what there is to see.
func Up(o Options) error {
	t0 := time.Now()
	ctx := context.Background()
	tools := stack.ToolsFromEnv()
	if why := tools.Unavailable(); why != "" {
		return errors.New(why)
	}
	st, err := stack.ReadState(o.statePath())
	switch {
	case err == nil && st.Runner.Alive():
		fmt.Printf("demo already running (pid %d); showing it\n", st.Runner.Pid)
	case err == nil:
		fmt.Println("a previous demo died; cleaning it up first")
		if err := stack.TearDown(st, 10*time.Second, func(f string, a ...any) { fmt.Printf("  "+f+"\n", a...) }); err != nil {
			return err
		}
		fallthrough
	default:
		if st, err = startServe(o); err != nil {
			return err
		}
	}
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, tools.Kubectl(), append([]string{"--kubeconfig", st.Kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	var files []string
	for g := range strings.FieldsSeq(o.Examples) {
		m, err := filepath.Glob(g)
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	for _, f := range files {
		out, err := kubectl("apply", "-f", f)
		if err != nil {
			return fmt.Errorf("kubectl apply -f %s: %w: %s", f, err, out)
		}
		fmt.Print(out)
	}
	pool := naming.PoolName(o.NodeName)
	if err := waitReady(ctx, kubectl, pool, o.Timeout); err != nil {
		return err
	}
	fmt.Printf("\npool %s Ready; make demo took %s\n", pool, time.Since(t0).Round(100*time.Millisecond))
	show(kubectl, st, tools)
	return nil
}

// startServe starts `demo serve` detached (its own session, output to the stack log),
// echoes the log while it starts, and returns the state it writes once the stack runs.
func startServe(o Options) (stack.State, error) {
	if err := os.MkdirAll(filepath.Dir(o.runnerLog()), 0o755); err != nil {
		return stack.State{}, err
	}
	log, err := os.OpenFile(o.runnerLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return stack.State{}, err
	}
	defer log.Close()
	self, err := os.Executable()
	if err != nil {
		return stack.State{}, err
	}
	cmd := exec.Command(self, "serve", "--dir="+o.Dir, "--bin="+o.Bin, "--images="+o.Images, "--node-name="+o.NodeName, "--node-label="+o.NodeLabel,
		fmt.Sprintf("--node-restriction=%t", o.NodeRestriction))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return stack.State{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting the stack in the background (pid %d, log %s)\n", cmd.Process.Pid, o.runnerLog())
	follow, err := os.Open(o.runnerLog())
	if err != nil {
		return stack.State{}, err
	}
	defer follow.Close()
	deadline := time.Now().Add(15 * time.Minute) // a fresh machine installs packages
	for {
		echo(follow)
		if st, err := stack.ReadState(o.statePath()); err == nil && st.Ready && st.Runner.Pid == cmd.Process.Pid {
			echo(follow)
			return st, nil
		}
		select {
		case err := <-exited:
			echo(follow)
			return stack.State{}, fmt.Errorf("the stack exited while starting (%w); logs in %s", err, filepath.Dir(o.runnerLog()))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return stack.State{}, errors.New("the stack did not start within 15 minutes")
		}
	}
}

// echo copies what was appended to the log since the last call to stdout, indented.
func echo(r io.Reader) {
	b, _ := io.ReadAll(r)
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l != "" {
			fmt.Print("  | " + l)
		}
	}
}

// waitReady polls the pool until its phase is Ready, printing each new phase and the
// conditions that are not yet what a Ready pool has.
func waitReady(ctx context.Context, kubectl func(...string) (string, error), pool string, timeout time.Duration) error {
	t0 := time.Now()
	last := ""
	jsonpath := `{.status.phase}{" "}{range .status.conditions[*]}{.type}={.status}{" "}{end}`
	for {
		out, err := kubectl("get", "sandboxpool", pool, "-o", "jsonpath="+jsonpath)
		state := strings.TrimSpace(out)
		if err != nil {
			state = "not created yet"
		}
		if state != last {
			fmt.Printf("  %5.1fs  %s: %s\n", time.Since(t0).Seconds(), pool, summarize(state))
			last = state
		}
		if err == nil && strings.HasPrefix(state, string(v1alpha1.PhaseReady)+" ") {
			return nil
		}
		if time.Since(t0) > timeout {
			return fmt.Errorf("pool %s not Ready within %s (last: %s)", pool, timeout, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// summarize keeps the phase and the conditions that are not settled: the ones that hold
// the pool back.
func summarize(state string) string {
	fields := strings.Fields(state)
	if len(fields) == 0 {
		return "no status yet"
	}
	good := map[string]string{
		v1alpha1.ConditionPlaceholderPodReady.String(): "True", v1alpha1.ConditionResourceSynced.String(): "True",
		v1alpha1.ConditionNodeCtlHealthy.String(): "True", v1alpha1.ConditionPlaceholderAgentHealthy.String(): "True",
		v1alpha1.ConditionNodeNotFound.String(): "False", v1alpha1.ConditionResizeInProgress.String(): "False", v1alpha1.ConditionResizeDeferred.String(): "False",
	}
	phase, rest := fields[0], fields[1:]
	if strings.Contains(phase, "=") {
		phase, rest = "(no phase)", fields
	}
	var pending []string
	for _, c := range rest {
		typ, status, _ := strings.Cut(c, "=")
		if good[typ] != status {
			pending = append(pending, c)
		}
	}
	if len(pending) == 0 {
		return "phase " + phase
	}
	return "phase " + phase + ", waiting on " + strings.Join(pending, " ")
}

// show prints the cluster half's Deployments and Pods (the placeholder's mirror pod among
// them), the classes and pools, the node's allocated resources and what to try next.
func show(kubectl func(...string) (string, error), st stack.State, tools stack.Tools) {
	section := func(title string, args ...string) string {
		out, err := kubectl(args...)
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
		if err != nil {
			fmt.Printf("(%v)\n", err)
		}
		return out
	}
	fmt.Print(section("the cluster half, from deploy/", "-n", v1alpha1.DefaultSystemNamespace, "get", "deployments,pods", "-o", "wide"))
	fmt.Print(section("classes and pools", "get", "spc,sp"))
	node := section("allocated", "describe", "node", st.NodeName)
	if i := strings.Index(node, "Allocated resources:"); i >= 0 {
		node = node[i:]
		if j := strings.Index(node, "Events:"); j >= 0 {
			node = node[:j]
		}
	}
	fmt.Print(node)
	pool := naming.PoolName(st.NodeName)
	// The pool's placeholder pods, by the names the agent gave them.
	mirror, _ := kubectl("-n", v1alpha1.DefaultPodNamespace, "get", "pods", "-l", v1alpha1.LabelPoolName+"="+naming.LabelValue(pool),
		"-o", "jsonpath={.items[*].metadata.name}")
	fmt.Printf(`
The controller and the webhook run as the Pods of their Deployments, applied with
  kubectl apply -k %[9]s
(deploy/ with the self-signed certificate and the images of make images). Their logs are in
%[10]s: kubelet serves no API here, so kubectl logs cannot reach them. The pool's cpu and
memory are locked on %[1]s by the static pods kubelet admitted, %[11]s above (the
placeholder runtime runs no process), and node-ctl enforces them on its cgroup. The node
half was installed by deploy/node/install.sh.

Use the demo's cluster:
  export KUBECONFIG=%[2]s
  alias kubectl=%[3]s

Try next:
  kubectl patch spc demo --type=merge -p '{"spec":{"resourcePolicy":{"resources":{"memory":"384Mi"}}}}'
                                          # resize: a placeholder pod for the growth, then
                                          # node-ctl; the pods are then folded into one
  kubectl patch spc demo --type=merge -p '{"spec":{"resourcePolicy":{"resources":{"cpu":"3"}}}}'
                                          # more than the node has: deferred, the lock kept
  kubectl get sp %[4]s -o jsonpath='{.status.resize}'; echo
  curl -s --unix-socket %[5]s http://node-ctl/v1/state; echo
  kubectl -n %[6]s delete pod -l sandbox-pool.io/node=%[1]s
                                          # the mirror pods: refused, the scheduler's view of
                                          # the lock never lapses (only the node deletes them)
  rm %[7]s/sandbox-pool-%[4]s_*.yaml
                                          # the manifests: the agent restores the lock at once
  kubectl -n %[6]s delete pod -l app.kubernetes.io/name=sandbox-pool-webhook --wait=false
                                          # the webhook's Pods: new ones take over, and no
                                          # pool write fails meanwhile
  kubectl delete spc demo                 # the pool, the pod and node-ctl's slice go
  make demo-down                          # stop everything (logs in %[8]s until then)
`, st.NodeName, st.Kubeconfig, tools.Kubectl(), pool, st.NodeCtlSocket, v1alpha1.DefaultPodNamespace, st.ManifestDir, st.LogDir,
		st.InstallDir, st.PodLogDir, strings.TrimSpace(mirror))
}
