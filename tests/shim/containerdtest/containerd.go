// Package containerdtest runs a real containerd for tests of the placeholder shim: the
// containerd, ctr and crictl that `make containerd` builds from the module proxy
// (SANDBOXPOOL_CONTAINERD points at them), started as root with its own root, state,
// sockets and shim socket directory under a short temporary directory, configured with the
// drop-in users install (deploy/containerd), and with the local pause image imported.
package containerdtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/shim/agentclient"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
)

// ToolsEnv names the directory holding containerd, ctr, containerd-shim-runc-v2 and crictl.
const ToolsEnv = "SANDBOXPOOL_CONTAINERD"

// Namespace is the containerd namespace of the tests that use ctr; CRI uses "k8s.io".
const Namespace = "shimtest"

// CRINamespace is CRI's containerd namespace.
const CRINamespace = "k8s.io"

var toolNames = []string{"containerd", "ctr", "containerd-shim-runc-v2", "crictl"}

// Unavailable says why containerd cannot run here, or "" when it can.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "containerd and its shims need root: run the tests as root"
	}
	dir := os.Getenv(ToolsEnv)
	if dir == "" {
		return ToolsEnv + " is not set: run the tests with `make test`, which builds containerd, ctr and crictl (`make containerd`)"
	}
	for _, b := range toolNames {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Sprintf("%s missing in %s=%s: run `make containerd`", b, ToolsEnv, dir)
		}
	}
	return ""
}

// Require skips t when containerd cannot run here, or fails it when the run demands the
// real parts (framework.RequireToolsEnv, set by make test).
func Require(t testing.TB) {
	t.Helper()
	if why := Unavailable(); why != "" {
		if os.Getenv(framework.RequireToolsEnv) != "" {
			t.Fatalf("containerd required but unavailable: %s", why)
		}
		t.Skip(why)
	}
}

// Artifacts are what the tests build from this checkout once per test binary: the shims
// and the pause image archive.
type Artifacts struct {
	// Bin holds containerd-shim-placeholder-v2 and containerd-shim-placeholder-fp-v2.
	Bin string
	// PauseImage is the OCI archive of image.Name.
	PauseImage string
}

// Build builds the artifacts into a new directory below /tmp.
func Build(ctx context.Context) (*Artifacts, error) {
	root, err := corpus.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "shimbin")
	if err != nil {
		return nil, err
	}
	a := &Artifacts{Bin: dir, PauseImage: filepath.Join(dir, "pause.tar")}
	if err := (support.GoBuild{Dir: root, Out: dir, Static: true}).Run(ctx,
		"./cmd/containerd-shim-placeholder-v2", "./tests/shim/failpoint/cmd/containerd-shim-placeholder-fp-v2"); err != nil {
		return nil, fmt.Errorf("building the shims: %w", err)
	}
	if err := image.Build(ctx, a.PauseImage); err != nil {
		return nil, err
	}
	return a, nil
}

// Remove deletes the artifacts.
func (a *Artifacts) Remove() error { return os.RemoveAll(a.Bin) }

// Options configure Start.
type Options struct {
	// Artifacts to use: the shims are put first on containerd's PATH.
	Artifacts *Artifacts
	// AgentAddress replaces the agent address of deploy/containerd.
	AgentAddress string
	// AgentTimeout replaces its Create/Start retry budget (short, so tests are quick).
	AgentTimeout time.Duration
	// LogLevel of containerd; "info" when empty.
	LogLevel string
}

// Containerd is a running containerd.
type Containerd struct {
	// Dir is the instance's directory: config, root, state, sockets, log.
	Dir string
	// Address is containerd's GRPC socket.
	Address string

	t     testing.TB
	tools string
	opts  Options
	log   string
	proc  *support.Proc
}

// Start starts containerd and imports the pause image for ctr (Namespace) and CRI; t's
// cleanup stops it and kills every shim it started.
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	Require(t)
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	dir, err := os.MkdirTemp("/tmp", "ctd")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{
		Dir: dir, Address: filepath.Join(dir, "c.sock"),
		t: t, tools: os.Getenv(ToolsEnv), opts: opts, log: filepath.Join(dir, "containerd.log"),
	}
	c.proc = support.NewProc("containerd", c.log, c.Tool("containerd"), []string{"--config", filepath.Join(c.Dir, "config.toml")})
	c.proc.Env = []string{"PATH=" + opts.Artifacts.Bin + ":" + c.tools + ":" + os.Getenv("PATH")}
	c.proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(c.cleanup)
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	c.start()
	for _, ns := range []string{Namespace, CRINamespace} {
		if out, err := c.Ctr(t.Context(), "-n", ns, "images", "import", opts.Artifacts.PauseImage); err != nil {
			t.Fatalf("importing the pause image: %v: %s", err, out)
		}
	}
	return c
}

// Tool is the path of one of the built tools (containerd, ctr, crictl, ...).
func (c *Containerd) Tool(name string) string { return filepath.Join(c.tools, name) }

// writeConfig writes containerd's configuration: this instance's paths, and the drop-in of
// deploy/containerd with the test's agent address and timeout.
func (c *Containerd) writeConfig() error {
	dropIn, err := DropIn(c.opts.AgentAddress, c.opts.AgentTimeout)
	if err != nil {
		return err
	}
	dropInPath := filepath.Join(c.Dir, "placeholder.toml")
	if err := os.WriteFile(dropInPath, dropIn, 0o644); err != nil {
		return err
	}
	config := Config(ConfigOptions{Dir: c.Dir, Address: c.Address, Imports: []string{dropInPath}, LogLevel: c.opts.LogLevel})
	return os.WriteFile(filepath.Join(c.Dir, "config.toml"), []byte(config), 0o644)
}

// ConfigOptions configure Config.
type ConfigOptions struct {
	// Dir holds containerd's root, state, opt and shim socket directories.
	Dir string
	// Address is the GRPC socket (the TTRPC one is Address.ttrpc).
	Address string
	// Imports are the drop-ins (paths or globs) containerd imports.
	Imports []string
	// LogLevel is containerd's log level; containerd's default when empty.
	LogLevel string
	// CNIBinDir and CNIConfDir, when set, configure CRI's CNI plugins, with the network
	// namespaces mounted below the state directory.
	CNIBinDir, CNIConfDir string
}

// Config is a containerd configuration for a test's own containerd on this host: its own
// paths, NRI off, the local pause image pinned as CRI's sandbox image, and
// restrict_oom_score_adj (the test VMs lack CAP_SYS_RESOURCE, without which every runc
// sandbox fails).
func Config(o ConfigOptions) string {
	var b strings.Builder
	imports := make([]string, len(o.Imports))
	for i, imp := range o.Imports {
		imports[i] = "'" + imp + "'"
	}
	fmt.Fprintf(&b, "version = 4\nroot = '%[1]s/root'\nstate = '%[1]s/state'\nimports = [%[2]s]\n", o.Dir, strings.Join(imports, ", "))
	if o.LogLevel != "" {
		fmt.Fprintf(&b, "\n[debug]\n  level = '%s'\n", o.LogLevel)
	}
	fmt.Fprintf(&b, `
[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '%[2]s'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '%[2]s.ttrpc'
  [plugins.'io.containerd.internal.v1.opt']
    path = '%[1]s/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '%[1]s/s'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[3]s'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
`, o.Dir, o.Address, image.Name)
	if o.CNIBinDir != "" {
		fmt.Fprintf(&b, `    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['%s']
      conf_dir = '%s'
`, o.CNIBinDir, o.CNIConfDir)
	}
	return b.String()
}

// DropIn is the containerd drop-in users install (deploy/containerd/placeholder.toml) with
// the agent's address and the shims' agent timeout replaced. The end-to-end stack
// (tests/e2e/stack) configures its node's containerd with it too.
func DropIn(agentAddress string, agentTimeout time.Duration) ([]byte, error) {
	root, err := corpus.RepoRoot()
	if err != nil {
		return nil, err
	}
	dropIn, err := os.ReadFile(filepath.Join(root, "deploy", "containerd", "placeholder.toml"))
	if err != nil {
		return nil, err
	}
	for from, to := range map[string]string{
		shimapi.AddressEnv + "=" + shimapi.DefaultAddress:                  shimapi.AddressEnv + "=" + agentAddress,
		agentclient.TimeoutEnv + "=" + agentclient.DefaultTimeout.String(): agentclient.TimeoutEnv + "=" + agentTimeout.String(),
	} {
		if !bytes.Contains(dropIn, []byte(from)) {
			return nil, fmt.Errorf("deploy/containerd/placeholder.toml no longer sets %s", from)
		}
		dropIn = bytes.ReplaceAll(dropIn, []byte(from), []byte(to))
	}
	return dropIn, nil
}

// start starts the containerd process and waits until it serves.
func (c *Containerd) start() {
	c.t.Helper()
	if err := c.proc.Start(); err != nil {
		c.t.Fatal(err)
	}
	if err := poll(30*time.Second, c.proc.Exited(), func() bool {
		conn, err := net.Dial("unix", c.Address)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}); err != nil {
		c.t.Fatalf("containerd did not come up: %v\n%s", err, c.tail(40))
	}
}

// Stop stops containerd (SIGTERM, then SIGKILL after 15 s). Its shims keep running.
func (c *Containerd) Stop() {
	_ = c.proc.Stop(15 * time.Second) // killed after 15 s: Stop returns only once it is gone
}

// Restart stops containerd and starts it again on the same state.
func (c *Containerd) Restart() {
	c.t.Helper()
	c.Stop()
	c.start()
}

func (c *Containerd) cleanup() {
	c.Stop()
	for pid := range c.ShimPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = poll(10*time.Second, nil, func() bool { return len(c.ShimPIDs()) == 0 })
	unmountBelow(c.Dir)
	if c.t.Failed() {
		c.t.Logf("containerd log (last lines):\n%s", c.tail(60))
	}
	_ = os.RemoveAll(c.Dir)
}

// Ctr runs ctr against this containerd.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Tool("ctr"), append([]string{"-a", c.Address}, args...)...).CombinedOutput()
	return withoutDeprecationNotes(string(out)), err
}

// withoutDeprecationNotes drops ctr's warning about cgroup v1 on this host.
func withoutDeprecationNotes(out string) string {
	var keep []string
	for l := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(l, "DEPRECATION") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// CRI connects to containerd's CRI service.
func (c *Containerd) CRI(t testing.TB) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	// CRI reports ready once its plugins have started.
	if err := poll(30*time.Second, nil, func() bool {
		st, err := rt.Status(t.Context(), &runtimeapi.StatusRequest{})
		if err != nil {
			return false
		}
		for _, cond := range st.GetStatus().GetConditions() {
			if cond.Type == runtimeapi.RuntimeReady {
				return cond.Status
			}
		}
		return false
	}); err != nil {
		t.Fatalf("CRI runtime not ready: %v", err)
	}
	return rt, runtimeapi.NewImageServiceClient(conn)
}

// LogMark is a position in containerd's log.
type LogMark int

// Mark returns the current end of containerd's log.
func (c *Containerd) Mark() LogMark { return LogMark(len(c.logLines())) }

// ProblemsSince returns the log lines at level warning or above written after m, leaving
// out the ones this host always produces (cgroup v1 deprecation, no CNI configuration).
func (c *Containerd) ProblemsSince(m LogMark) []string {
	var out []string
	lines := c.logLines()
	if int(m) > len(lines) {
		return nil
	}
	for _, l := range lines[m:] {
		if !strings.Contains(l, "level=error") && !strings.Contains(l, "level=warning") && !strings.Contains(l, "level=fatal") {
			continue
		}
		if strings.Contains(l, "cgroup v1 is deprecated") || strings.Contains(l, "cni") {
			continue
		}
		out = append(out, l)
	}
	return out
}

func (c *Containerd) logLines() []string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

func (c *Containerd) tail(n int) string { return c.proc.Tail(n) }

// Shim is a running shim process of this containerd.
type Shim struct {
	Binary string // base name, containerd-shim-<runtime>-v2
	Bundle string // working directory: the bundle of the task it was started for
}

// ShimPIDs returns the shim processes of this containerd (those whose bundle is below Dir).
func (c *Containerd) ShimPIDs() map[int]Shim { return ShimsBelow(c.Dir) }

// ShimsBelow returns the shim processes whose bundle (working directory) is below dir: the
// shims of a containerd whose state lives there.
func ShimsBelow(dir string) map[int]Shim {
	out := map[int]Shim{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err1 := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		cwd, err2 := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err1 != nil || err2 != nil {
			continue
		}
		base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		if strings.HasPrefix(base, "containerd-shim-") && strings.HasPrefix(cwd, dir+"/") {
			out[pid] = Shim{Binary: base, Bundle: cwd}
		}
	}
	return out
}

// Memory is a process's resident memory in bytes: RSS, and PSS (shared pages divided among
// the processes sharing them, which is what N shims of one binary really cost).
type Memory struct{ RSS, PSS uint64 }

// MemoryOf reads /proc/pid/smaps_rollup.
func MemoryOf(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	var m Memory
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			m.RSS = kb << 10
		case "Pss:":
			m.PSS = kb << 10
		}
	}
	return m, s.Err()
}

// poll checks cond every 20 ms until it holds, until the deadline, or until stop closes.
func poll(timeout time.Duration, stop <-chan struct{}, cond func() bool) error {
	return support.Poll(context.Background(), 20*time.Millisecond, timeout, stop, func() (bool, string, error) {
		return cond(), "", nil
	})
}

// Poll is poll for tests: it fails t with what when cond does not hold within timeout.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(timeout, nil, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// UnmountBelow detaches whatever is still mounted below dir (container root file systems,
// network namespaces), deepest first.
func UnmountBelow(dir string) { unmountBelow(dir) }

// unmountBelow detaches whatever a failed test left mounted below dir (rootfs of runc
// containers), deepest first, so the directory can be removed.
func unmountBelow(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mounts []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for _, mount := range slices.Backward(mounts) {
		_ = syscall.Unmount(mount, syscall.MNT_DETACH)
	}
}
