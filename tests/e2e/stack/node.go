package stack

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// The node's files: everything below Stack.Dir/n (kept short: unix socket paths are
// limited to 108 bytes, and containerd's shim sockets add a 64-character hash). The node
// half is installed below n/i, in the places install.sh's path variables name (in
// brackets, each one's default on a real node).
type nodePaths struct {
	dir             string // <dir>/n
	manifests       string // kubelet's staticPodPath [/etc/kubernetes/manifests]
	containerd      string // containerd's config, root, state, sockets
	socket          string // containerd's GRPC socket (CRI for kubelet)
	binDir          string // the installed binaries [/usr/local/bin]
	units           string // the installed units [/etc/systemd/system]
	defaults        string // their environment files [/etc/default]
	containerdConfD string // the installed containerd drop-in [/etc/containerd/conf.d]
	config          string // node-ctl's config, the agent's Lease credentials [/etc/sandbox-pool]
	run             string // node-ctl's and the agent's sockets [/run/sandbox-pool]
	agentSocket     string // the agent's shim API (the drop-in's SANDBOXPOOL_AGENT_ADDRESS)
	nodeCtlSock     string
	nodeCtlCfg      string
	nodeCtlPid      string // the supervisor's: node-ctl's PID and its unit's stopped mark
	nodeCtlHold     string
	systemctl       string // the agent's systemctl (writeSystemctl)
	cniConf         string
	cniIPAM         string
	kubeletRoot     string
	kubeletCfg      string
	kubeProxyCfg    string
	podLogs         string
	pauseArchive    string
	loadArchive     string
}

func newNodePaths(dir string) nodePaths {
	n := filepath.Join(dir, "n")
	i := filepath.Join(n, "i")
	return nodePaths{
		dir:             n,
		manifests:       filepath.Join(n, "manifests"),
		containerd:      filepath.Join(n, "c"),
		socket:          filepath.Join(n, "c", "c.sock"),
		binDir:          filepath.Join(i, "bin"),
		units:           filepath.Join(i, "systemd"),
		defaults:        filepath.Join(i, "default"),
		containerdConfD: filepath.Join(i, "conf.d"),
		config:          filepath.Join(i, "etc"),
		run:             filepath.Join(i, "run"),
		agentSocket:     filepath.Join(i, "run", "agent.sock"),
		nodeCtlSock:     filepath.Join(i, "run", "node-ctl.sock"),
		nodeCtlCfg:      filepath.Join(i, "etc", "node-ctl.json"),
		nodeCtlPid:      filepath.Join(n, "sup", "node-ctl.pid"),
		nodeCtlHold:     filepath.Join(n, "sup", "node-ctl.stopped"),
		systemctl:       filepath.Join(n, "sup", "bin", "systemctl"),
		cniConf:         filepath.Join(n, "net.d"),
		cniIPAM:         filepath.Join(n, "ipam"),
		kubeletRoot:     filepath.Join(n, "kubelet"),
		kubeletCfg:      filepath.Join(n, "kubelet.yaml"),
		kubeProxyCfg:    filepath.Join(n, "kube-proxy.yaml"),
		podLogs:         filepath.Join(n, "pod-logs"),
		pauseArchive:    filepath.Join(n, "pause.tar"),
		loadArchive:     filepath.Join(n, "load.tar"),
	}
}

// network is the node's CNI bridge network, derived from the stack's id so two stacks on
// one machine (the demo and a test run) do not share a bridge or a subnet.
type network struct {
	Name   string // CNI network name
	Bridge string // Linux bridge, at most 15 characters
	Subnet string // a /24 in 10.222.0.0/16: the pods' addresses (kube-proxy's clusterCIDR)
	// Gateway is the bridge's own address, the first of Subnet: the node's address on the
	// pod network, where the API server listens and which it advertises as the endpoint of
	// the `kubernetes` Service.
	Gateway string
}

func networkFor(id string) network {
	h := sha256.Sum256([]byte(id))
	return network{
		Name:    "sandboxpool-" + id,
		Bridge:  "sp" + fmt.Sprintf("%x", h[:4]), // 10 characters
		Subnet:  fmt.Sprintf("10.222.%d.0/24", h[4]),
		Gateway: fmt.Sprintf("10.222.%d.1", h[4]),
	}
}

// createBridge creates the network's bridge with its gateway address before anything runs,
// so that the API server can listen on that address from the start (the CNI bridge plugin
// takes an existing bridge that already has the gateway address as it is). A bridge with
// no port yet is down for forwarding, but its address answers locally, which is all the
// host's own clients (the control plane, kubelet, the tests) need.
func createBridge(n network) error {
	deleteLink(n.Bridge) // left by a stack that crashed
	for _, args := range [][]string{
		{"link", "add", "name", n.Bridge, "type", "bridge"},
		{"addr", "add", n.Gateway + "/24", "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// writeCNIConfig writes the bridge + host-local network (Debian's containernetworking-
// plugins): what makes the node Ready, and what gives a pod with its own network namespace
// (the controller's and the webhook's, a placeholder with --netns-enabled) an address. No
// IP masquerading: the pods talk to this host only (the API server on the bridge's
// gateway address), and the CNI plugin writes nothing to iptables.
func writeCNIConfig(p nodePaths, n network) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.Subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": p.cniIPAM,
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.cniConf, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.cniConf, "10-sandboxpool.conflist"), b, 0o644)
}

// writeContainerdConfig writes containerd's configuration: this node's paths, the CRI
// settings this host needs (REAL-STACK.md: restrict_oom_score_adj, the local pause image
// pinned as the sandbox image, CNI from Debian's package), network namespaces under the
// state directory, and the import of the installed drop-ins (install.sh's
// CONTAINERD_CONF_DIR), as containerd's default configuration imports
// /etc/containerd/conf.d/*.toml.
func writeContainerdConfig(p nodePaths) error {
	if err := os.MkdirAll(p.containerd, 0o755); err != nil {
		return err
	}
	config := containerdtest.Config(containerdtest.ConfigOptions{
		Dir: p.containerd, Address: p.socket, Imports: []string{p.containerdConfD + "/*.toml"},
		CNIBinDir: CNIBinDir, CNIConfDir: p.cniConf,
	})
	return os.WriteFile(filepath.Join(p.containerd, "config.toml"), []byte(config), 0o644)
}

// kubeletConfig is the KubeletConfiguration of the node (REAL-STACK.md: cgroup v1 host →
// failCgroupV1 false, cgroupfs). Everything kubelet writes is below the node's directory but
// its pod cgroups, below the cgroupRoot of a production node ("/"); it opens no port (enableServer false, no healthz or
// read-only port but on loopback) and touches no iptables. One host-wide effect remains: like every kubelet
// without protectKernelDefaults (which would refuse to start instead), it sets the kernel
// tunables it expects — vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
// kernel.panic_on_oops=1 — and they stay set after it stops.
type kubeletConfig struct {
	APIVersion                  string            `json:"apiVersion"`
	Kind                        string            `json:"kind"`
	FailCgroupV1                bool              `json:"failCgroupV1"`
	CgroupDriver                string            `json:"cgroupDriver"`
	CgroupRoot                  string            `json:"cgroupRoot"`
	ContainerRuntimeEndpoint    string            `json:"containerRuntimeEndpoint"`
	StaticPodPath               string            `json:"staticPodPath"`
	FileCheckFrequency          string            `json:"fileCheckFrequency"`
	SyncFrequency               string            `json:"syncFrequency"`
	PodLogsDir                  string            `json:"podLogsDir"`
	EnableServer                bool              `json:"enableServer"`
	Address                     string            `json:"address"`
	HealthzPort                 int               `json:"healthzPort"`
	ReadOnlyPort                int               `json:"readOnlyPort"`
	MakeIPTablesUtilChains      bool              `json:"makeIPTablesUtilChains"`
	EvictionHard                map[string]string `json:"evictionHard"`
	ImageGCHighThresholdPercent int               `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent  int               `json:"imageGCLowThresholdPercent"`
	Authentication              map[string]any    `json:"authentication"`
	Authorization               map[string]any    `json:"authorization"`
	RegisterNode                bool              `json:"registerNode"`
	SystemReserved              map[string]string `json:"systemReserved,omitempty"`
}

func writeKubeletConfig(p nodePaths, cgroupRoot string, readOnlyPort int, systemReserved map[string]string) error {
	c := kubeletConfig{
		APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration",
		FailCgroupV1: false, CgroupDriver: "cgroupfs", CgroupRoot: cgroupRoot,
		ContainerRuntimeEndpoint: "unix://" + p.socket,
		StaticPodPath:            p.manifests,
		// kubelet watches the directory with inotify; this is its re-list period.
		FileCheckFrequency: "5s",
		// How often kubelet syncs every pod; a deleted mirror pod is created again only on
		// this sync (kubelet's default: 1 min).
		SyncFrequency: "10s",
		PodLogsDir:    p.podLogs,
		EnableServer:  false, HealthzPort: 0,
		// The read-only port on loopback serves kubelet's /pods: the pods kubelet has
		// admitted, static ones with their status, which the end-to-end invariant watcher
		// reads (a test observer; production kubelets keep it off).
		Address: "127.0.0.1", ReadOnlyPort: readOnlyPort,
		MakeIPTablesUtilChains: false,
		// A shared test machine's disk must not evict the placeholder pod.
		EvictionHard:                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		ImageGCHighThresholdPercent: 100, ImageGCLowThresholdPercent: 99,
		Authentication: map[string]any{"anonymous": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": false}},
		Authorization:  map[string]any{"mode": "AlwaysAllow"},
		RegisterNode:   true,
		SystemReserved: systemReserved,
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(p.kubeletCfg, b, 0o644)
}

// cgroupV1Mounts are the mount points of the cgroup v1 hierarchies (and the unified one of
// a hybrid host), from /proc/self/mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out, s.Err()
}

// removeCgroup kills every process left in the cgroup at path and below it, in every
// hierarchy, and removes the cgroups, deepest first.
func removeCgroup(path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		top := filepath.Join(m, path)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, dir := range slices.Backward(dirs) {
			if err := rmdirCgroup(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup kills what still runs in the cgroup dir and removes it, trying for 5 s (the
// kernel removes a cgroup only once its last process is gone).
func rmdirCgroup(dir string) error {
	var err error
	if wait.PollUntilContextTimeout(context.Background(), pollInterval, 5*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for f := range strings.FieldsSeq(string(b)) {
			if pid, perr := strconv.Atoi(f); perr == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		err = syscall.Rmdir(dir)
		return err == nil || errors.Is(err, syscall.ENOENT), nil
	}) != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
	return nil
}

// unmountAll detaches everything mounted below dir — container root file systems, network
// namespaces, kubelet's bind mount of its root directory (one per kubelet start) — until
// nothing is left, so that dir can be removed.
func unmountAll(dir string) {
	for range 20 {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil || !strings.Contains(string(b), " "+dir+"/") {
			return
		}
		containerdtest.UnmountBelow(dir)
	}
}

// deleteLink removes a network interface (the CNI bridge) if it exists.
func deleteLink(name string) {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		return
	}
	_ = exec.Command("ip", "link", "delete", name).Run()
}
