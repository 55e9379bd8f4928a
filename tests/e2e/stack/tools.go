package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// Environment variables that locate the tools (make test and make demo set them).
const (
	// KubeAssetsEnv names the directory with kube-apiserver, etcd, kubectl, kubelet,
	// kube-controller-manager, kube-scheduler and kube-proxy (`make tools`); envtest reads
	// the same variable.
	KubeAssetsEnv = "KUBEBUILDER_ASSETS"
	// ContainerdEnv names the directory with containerd, ctr, the runc shim and crictl
	// (`make containerd`).
	ContainerdEnv = containerdtest.ToolsEnv
	// ImagesEnv names the directory with the controller's and the webhook's image archives
	// (`make images`); unset, the stack builds them.
	ImagesEnv = "SANDBOXPOOL_IMAGES"
)

// CNIBinDir is where Debian's containernetworking-plugins installs the CNI plugins.
const CNIBinDir = "/usr/lib/cni"

// hostPackages are the Debian packages the node needs, each with a file that shows it is
// installed: the CNI plugins (node Ready, and pods with their own network namespace), runc
// (ordinary pods — the controller's and the webhook's — run by containerd's default
// runtime) and iptables (kube-proxy's Services).
var hostPackages = []struct{ name, file string }{
	{"containernetworking-plugins", filepath.Join(CNIBinDir, "bridge")},
	{"runc", ""},     // looked up on PATH
	{"iptables", ""}, // looked up on PATH
}

// Tools are the binaries the stack runs.
type Tools struct {
	KubeAssets string // kube-apiserver, etcd, kubectl, kubelet, kube-controller-manager, kube-scheduler, kube-proxy
	Containerd string // containerd, ctr, containerd-shim-runc-v2, crictl
}

// KubeBinaries are the Kubernetes binaries the stack runs.
var KubeBinaries = []string{"kube-apiserver", "etcd", "kubectl", "kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// ToolsFromEnv reads the tool directories from the environment.
func ToolsFromEnv() Tools {
	return Tools{KubeAssets: os.Getenv(KubeAssetsEnv), Containerd: os.Getenv(ContainerdEnv)}
}

// Kubectl is the built kubectl.
func (t Tools) Kubectl() string { return filepath.Join(t.KubeAssets, "kubectl") }

// Unavailable says why the stack cannot run here, or "" when it can. Missing host packages
// are not a reason: EnsureHostPackages installs them.
func (t Tools) Unavailable() string {
	if os.Geteuid() != 0 {
		return "the end-to-end stack (kubelet, containerd, node-ctl on real cgroups) needs root: run as root (CI does)"
	}
	if t.KubeAssets == "" {
		return KubeAssetsEnv + " is not set: run with `make test` or `make demo`, which build the Kubernetes binaries"
	}
	for _, b := range KubeBinaries {
		if _, err := os.Stat(filepath.Join(t.KubeAssets, b)); err != nil {
			return fmt.Sprintf("%s missing in %s=%s: run `make tools`", b, KubeAssetsEnv, t.KubeAssets)
		}
	}
	if t.Containerd == "" {
		return ContainerdEnv + " is not set: run with `make test` or `make demo`, which build containerd (`make containerd`)"
	}
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "crictl"} {
		if _, err := os.Stat(filepath.Join(t.Containerd, b)); err != nil {
			return fmt.Sprintf("%s missing in %s=%s: run `make containerd`", b, ContainerdEnv, t.Containerd)
		}
	}
	if err := cgroup.Available(); err != nil {
		return "cgroup controllers unavailable: " + err.Error()
	}
	return ""
}

// EnsureHostPackages installs the Debian packages the node needs when they are missing
// (apt-get update, then apt-get install), and says what it did through logf.
func EnsureHostPackages(ctx context.Context, logf func(string, ...any)) error {
	var missing []string
	for _, p := range hostPackages {
		if p.file != "" {
			if _, err := os.Stat(p.file); err == nil {
				continue
			}
		} else if _, err := exec.LookPath(p.name); err == nil {
			continue
		}
		missing = append(missing, p.name)
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("packages %s are missing and there is no apt-get to install them", strings.Join(missing, ", "))
	}
	logf("installing %s with apt-get", strings.Join(missing, ", "))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y", "--no-install-recommends"}, missing...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, lastLines(string(out), 20))
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
