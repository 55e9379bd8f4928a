package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/tests/support"
)

// kube-proxy runs on the node as a host process, like kubelet (a DaemonSet would need its
// image, which no registry here can serve), in iptables mode: the `kubernetes` Service for
// the Pods, the webhook's Service for the API server. What it changes on the host besides
// iptables is switched off in its configuration: it leaves the conntrack sysctls alone
// (conntrack's limits and timeouts at 0), sets no route_localnet (no NodePorts on
// loopback) and no OOM score. Its rules outlive it, as on any node: Stop (and TearDown, for
// a stack whose runner died) removes them with `kube-proxy --cleanup`, which deletes every
// KUBE-* chain and rule of the host's iptables, so the host is left as it was — and so only
// one stack with kube-proxy may run on a machine at a time (tests/e2e and make demo take
// turns).

// kubeProxyConfig is the part of KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1)
// the stack sets.
type kubeProxyConfig struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	ClientConnection struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"clientConnection"`
	HostnameOverride   string         `json:"hostnameOverride"`
	Mode               string         `json:"mode"`
	ClusterCIDR        string         `json:"clusterCIDR"`
	DetectLocalMode    string         `json:"detectLocalMode"`
	HealthzBindAddress string         `json:"healthzBindAddress"`
	MetricsBindAddress string         `json:"metricsBindAddress"`
	OOMScoreAdj        int            `json:"oomScoreAdj"`
	IPTables           map[string]any `json:"iptables"`
	Conntrack          map[string]any `json:"conntrack"`
}

// writeKubeProxyConfig writes kube-proxy's configuration for the node: its identity, the
// pod network (the traffic kube-proxy treats as local), and the healthz address Ready
// waits on.
func (s *Stack) writeKubeProxyConfig(kubeconfig, healthz string) error {
	metrics, err := support.PickFreeAddr()
	if err != nil {
		return err
	}
	c := kubeProxyConfig{
		APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration",
		HostnameOverride: s.Opts.NodeName, Mode: "iptables",
		ClusterCIDR: s.Network.Subnet, DetectLocalMode: "ClusterCIDR",
		HealthzBindAddress: healthz, MetricsBindAddress: metrics,
		IPTables:  map[string]any{"localhostNodePorts": false},
		Conntrack: map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	}
	c.ClientConnection.Kubeconfig = kubeconfig
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(s.paths.kubeProxyCfg, b, 0o644)
}

// cleanupKubeProxy removes kube-proxy's iptables rules: `kube-proxy --cleanup` removes its
// Service chains, and leaves the KUBE-FIREWALL chain (the martian-packet rule it shares
// with kubelet, which kubelet here does not make: makeIPTablesUtilChains is false), which
// is removed after it, with the INPUT and OUTPUT rules that jump to it.
func cleanupKubeProxy(bin string) error {
	if bin == "" {
		return nil
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-proxy's iptables rules are left: %s: %w", bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "--cleanup").CombinedOutput(); err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, lastLines(string(out), 10))
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		run := func(args ...string) error { return exec.CommandContext(ctx, ipt, args...).Run() }
		if run("-w", "-t", "filter", "-n", "-L", firewallChain) != nil {
			continue // no such chain
		}
		// Each jump is deleted until none is left (kube-proxy adds one; a restarted one that
		// raced its own check could have added two).
		for _, builtin := range []string{"INPUT", "OUTPUT"} {
			for range 10 {
				if run("-w", "-t", "filter", "-D", builtin, "-j", firewallChain) != nil {
					break
				}
			}
		}
		if err := run("-w", "-t", "filter", "-F", firewallChain); err != nil {
			return fmt.Errorf("%s -F %s: %w", ipt, firewallChain, err)
		}
		if err := run("-w", "-t", "filter", "-X", firewallChain); err != nil {
			return fmt.Errorf("%s -X %s: %w", ipt, firewallChain, err)
		}
	}
	return nil
}

// firewallChain is the martian-packet chain kube-proxy makes and --cleanup leaves.
const firewallChain = "KUBE-FIREWALL"

// kubeProxyBin is the kube-proxy binary of the stack's tools.
func (s *Stack) kubeProxyBin() string { return filepath.Join(s.Opts.Tools.KubeAssets, "kube-proxy") }

// KubeIptablesLines counts the lines of the host's iptables and ip6tables rules that name a
// KUBE-* chain: how a test sees that a stopped stack left none.
func KubeIptablesLines() (int, error) {
	n := 0
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).Output()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", save, err)
		}
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(l, "KUBE-") {
				n++
			}
		}
	}
	return n, nil
}
