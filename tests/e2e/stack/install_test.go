package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/corpus"
)

// installPaths are install.sh's path variables, each with its default on a real node.
var installPaths = [][2]string{
	{"BIN_DIR", "/usr/local/bin"},
	{"UNIT_DIR", "/etc/systemd/system"},
	{"DEFAULT_DIR", "/etc/default"},
	{"CONTAINERD_CONF_DIR", "/etc/containerd/conf.d"},
	{"CONFIG_DIR", "/etc/sandbox-pool"},
	{"STATE_DIR", "/var/lib/sandbox-pool"},
	{"RUN_DIR", "/run/sandbox-pool"},
	{"KUBELET_KUBECONFIG", "/etc/kubernetes/kubelet.conf"},
	{"MANIFEST_DIR", "/etc/kubernetes/manifests"},
	{"CGROUP_PATH", "/kubepods/sandbox-pool"},
}

// runInstall runs deploy/node/install.sh with every path below dir (the default path's
// own shape, so the mapping back is a prefix), binaries from bin, and a systemctl that logs
// its calls; it returns the repository root and the log.
func runInstall(t *testing.T, dir, bin string, env ...string) (root, systemctlLog string) {
	t.Helper()
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "systemctl.log")
	systemctl := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(systemctl, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, installScript))
	cmd.Env = append(os.Environ(), "BIN="+bin, "SYSTEMCTL="+systemctl, "NODE_NAME=node-a", "NODE_CTL_ZONE=zone-a")
	for _, p := range installPaths {
		cmd.Env = append(cmd.Env, p[0]+"="+dir+p[1])
	}
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", installScript, err, out)
	}
	b, _ := os.ReadFile(log)
	return root, string(b)
}

func fakeBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, pkg := range NodeBinaries {
		if err := os.WriteFile(filepath.Join(bin, filepath.Base(pkg)), []byte("#!/bin/sh\n# "+pkg+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// TestInstallScript: deploy/node/install.sh installs the binaries (0755), the drop-in and
// the units with each default path replaced by the one given and nothing else changed,
// the environment files, and then runs systemctl as docs/operator-guide.md says.
func TestInstallScript(t *testing.T) {
	dir := t.TempDir()
	bin := fakeBinaries(t)
	root, calls := runInstall(t, dir, bin, "LEASE_KUBECONFIG="+dir+"/etc/sandbox-pool/lease.kubeconfig", "AGENT_ARGS=--metrics-addr=0")

	for _, pkg := range NodeBinaries {
		name := filepath.Base(pkg)
		fi, err := os.Stat(filepath.Join(dir, "usr/local/bin", name))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("binary %s: %v %v, want mode 0755", name, err, fi)
		}
	}
	// The installed files, with dir taken out of every path, are the repository's.
	for installed, source := range map[string]string{
		"etc/containerd/conf.d/placeholder.toml":       "deploy/containerd/placeholder.toml",
		"etc/systemd/system/node-ctl.service":          "deploy/node/node-ctl.service",
		"etc/systemd/system/placeholder-agent.service": "deploy/node/placeholder-agent.service",
	} {
		got, err := os.ReadFile(filepath.Join(dir, installed))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, source))
		if err != nil {
			t.Fatal(err)
		}
		if back := strings.ReplaceAll(string(got), dir+"/", "/"); back != string(want) {
			t.Errorf("%s is not %s with the paths replaced:\n%s", installed, source, back)
		}
		if fi, _ := os.Stat(filepath.Join(dir, installed)); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644", installed, fi.Mode().Perm())
		}
	}
	for file, want := range map[string]string{
		"etc/default/node-ctl":          "NODE_CTL_ZONE=zone-a\nNODE_CTL_ARGS=\n",
		"etc/default/placeholder-agent": "NODE_NAME=node-a\nAGENT_ARGS=--lease-kubeconfig=" + dir + "/etc/sandbox-pool/lease.kubeconfig --metrics-addr=0\n",
	} {
		if got, err := os.ReadFile(filepath.Join(dir, file)); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", file, got, err, want)
		}
	}
	want := "daemon-reload\nrestart containerd\nenable node-ctl placeholder-agent\nrestart node-ctl placeholder-agent\n"
	if calls != want {
		t.Errorf("systemctl calls:\n%s\nwant:\n%s", calls, want)
	}

	// What systemd runs: the units' ExecStart with their environment files.
	for unit, argv := range map[string][]string{
		"node-ctl": {dir + "/usr/local/bin/node-ctl", "--socket=" + dir + "/run/sandbox-pool/node-ctl.sock",
			"--config=" + dir + "/etc/sandbox-pool/node-ctl.json", "--cgroup-path=" + dir + "/kubepods/sandbox-pool", "--zone=zone-a"},
		"placeholder-agent": {dir + "/usr/local/bin/placeholder-agent", "--node-name=node-a",
			"--kubeconfig=" + dir + "/etc/kubernetes/kubelet.conf", "--manifest-dir=" + dir + "/etc/kubernetes/manifests",
			"--node-ctl-socket=" + dir + "/run/sandbox-pool/node-ctl.sock", "--node-ctl-config=" + dir + "/etc/sandbox-pool/node-ctl.json",
			"--state-file=" + dir + "/var/lib/sandbox-pool/agent-state.json",
			"--shim-address=" + dir + "/run/sandbox-pool/agent.sock", "--healthz-addr=127.0.0.1:8080", "--metrics-addr=127.0.0.1:8090",
			"--lease-kubeconfig=" + dir + "/etc/sandbox-pool/lease.kubeconfig", "--metrics-addr=0"},
	} {
		spec, err := readUnit(filepath.Join(dir, "etc/systemd/system", unit+".service"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(spec.Argv, argv) {
			t.Errorf("%s runs\n%q\nwant\n%q", unit, spec.Argv, argv)
		}
		if want := map[string]time.Duration{"node-ctl": time.Second, "placeholder-agent": 2 * time.Second}[unit]; spec.RestartDelay != want {
			t.Errorf("%s: RestartSec %s, want %s", unit, spec.RestartDelay, want)
		}
	}
}

// TestInstallScriptRefuses: missing binaries and relative paths stop the script before it
// installs anything.
func TestInstallScriptRefuses(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string][]string{
		"no binaries":   {"BIN=" + t.TempDir()},
		"relative path": {"BIN=" + fakeBinaries(t), "BIN_DIR=usr/local/bin"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(filepath.Join(root, installScript))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SYSTEMCTL=")
			for _, p := range installPaths {
				cmd.Env = append(cmd.Env, p[0]+"="+dir+p[1])
			}
			cmd.Env = append(cmd.Env, env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("install.sh succeeded: %s", out)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, "etc")); len(entries) > 0 {
				t.Errorf("install.sh installed files before it failed: %v", entries)
			}
		})
	}
}

// TestReadUnit: environment files (optional with "-"), ${VAR} within a word, $VAR as words.
func TestReadUnit(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	if err := os.WriteFile(env, []byte("# comment\nA=one\nB=\"two three\"\nEMPTY=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "x.service")
	content := "[Unit]\nDescription=x\nExecStart=/not/this\n\n[Service]\nEnvironmentFile=" + env + "\nEnvironmentFile=-" + dir + "/missing\n" +
		"ExecStart=/bin/x \\\n    --a=${A} \\\n    $B $EMPTY --c=${EMPTY}\nRestartSec=3\n"
	if err := os.WriteFile(unit, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := readUnit(unit)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/x", "--a=one", "two", "three", "--c="}; !slices.Equal(spec.Argv, want) || spec.RestartDelay != 3*time.Second {
		t.Errorf("readUnit = %q, %s; want %q, 3s", spec.Argv, spec.RestartDelay, want)
	}
	for name, bad := range map[string]string{
		"quotes":       "[Service]\nExecStart=/bin/x \"a b\"\n",
		"prefix":       "[Service]\nExecStart=-/bin/x\n",
		"no ExecStart": "[Service]\nRestart=always\n",
		"required env": "[Service]\nEnvironmentFile=" + dir + "/missing\nExecStart=/bin/x\n",
	} {
		if err := os.WriteFile(unit, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readUnit(unit); err == nil {
			t.Errorf("%s: readUnit accepted it", name)
		}
	}
}
