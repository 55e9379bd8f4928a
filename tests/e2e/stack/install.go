package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentcube/sandboxpool/hack/pause/image"
)

// The node half is installed as docs/operator-guide.md ("Node setup") says, by the same
// commands: hack/agent-lease-credentials.sh makes the agent's Lease identity, and
// deploy/node/install.sh installs the binaries, the containerd drop-in, the units and their
// environment files — here into the node's directory (its path variables set to the
// stack's paths) and without systemctl. What systemd would do next, the stack does:
// containerd is started with a configuration that imports the installed drop-in directory
// (as containerd's default configuration imports /etc/containerd/conf.d), and its
// supervisor (Unit) runs node-ctl and the agent from the installed unit files. The agent's
// systemctl commands (--node-ctl-stop-command, --node-ctl-restart-command) reach that
// supervisor through a systemctl on the agent's PATH that does to node-ctl's unit what
// systemctl does (writeSystemctl).

// installScript is the node install procedure, relative to the repository root.
const installScript = "deploy/node/install.sh"

// installNode runs hack/agent-lease-credentials.sh and deploy/node/install.sh for the node.
func (s *Stack) installNode(ctx context.Context, nodeKubeconfig string) error {
	p, root := s.paths, s.CP.Root
	leaseDir := filepath.Join(p.config, "lease")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "agent-lease-credentials.sh"), s.Opts.NodeName, leaseDir)
	cmd.Env = append(os.Environ(), "KUBECTL="+s.Opts.Tools.Kubectl(), "KUBECONFIG="+s.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/agent-lease-credentials.sh: %w: %s", err, out)
	}
	lease := filepath.Join(leaseDir, "kubeconfig")
	// The node reaches the API server through the link (CutNodeLink).
	if err := pointAt(lease, "https://"+s.link.addr); err != nil {
		return err
	}
	s.Opts.Logf("%s for %s (units in %s)", installScript, s.Opts.NodeName, p.units)
	cmd = exec.CommandContext(ctx, filepath.Join(root, installScript))
	cmd.Env = append(os.Environ(), s.installEnv(nodeKubeconfig, lease)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", installScript, err, out)
	}
	return writeSystemctl(p)
}

// installEnv are install.sh's variables for the stack's node.
func (s *Stack) installEnv(nodeKubeconfig, leaseKubeconfig string) []string {
	p := s.paths
	return []string{
		"NODE_NAME=" + s.Opts.NodeName, "NODE_CTL_ZONE=" + s.Opts.Zone, "LEASE_KUBECONFIG=" + leaseKubeconfig,
		"AGENT_ARGS=" + strings.Join(s.agentArgs(), " "), "NODE_CTL_ARGS=",
		"BIN=" + s.bin, "BIN_DIR=" + p.binDir, "UNIT_DIR=" + p.units, "DEFAULT_DIR=" + p.defaults,
		"CONTAINERD_CONF_DIR=" + p.containerdConfD, "CONFIG_DIR=" + p.config, "RUN_DIR=" + p.run,
		"STATE_DIR=" + filepath.Join(p.dir, "i", "state"),
		"KUBELET_KUBECONFIG=" + nodeKubeconfig, "MANIFEST_DIR=" + p.manifests, "CGROUP_PATH=" + s.NodeCtlCgroup,
		"SYSTEMCTL=",
	}
}

// InstallVars are the variables the stack ran install.sh with (BIN_DIR, RUN_DIR, …).
func (s *Stack) InstallVars() map[string]string {
	out := map[string]string{}
	for _, kv := range s.installEnv(filepath.Join(s.Opts.Dir, "kc", "node.kubeconfig"), filepath.Join(s.paths.config, "lease", "kubeconfig")) {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// agentArgs are the agent's flags beyond its unit's (AGENT_ARGS): the stack's timers, the
// local pause image, and addresses that do not collide with another agent on this machine.
func (s *Stack) agentArgs(extra ...string) []string {
	t := s.Opts.Timers
	return append([]string{
		"--pause-image=" + image.Name,
		"--node-ctl-poll-interval=" + t.NodeCtlPollInterval.String(),
		"--lease-renew-interval=" + t.LeaseRenewInterval.String(), "--lease-ttl=" + t.LeaseTTL.String(),
		"--manifest-verify-interval=" + t.ManifestVerifyInterval.String(),
		"--resize-deferred-warning-after=" + t.DeferredWarningAfter.String(),
		"--piece-start-timeout=" + t.PieceStartTimeout.String(),
		"--healthz-addr=" + s.agentHealthz, "--metrics-addr=0",
	}, extra...)
}

// setAgentArgs writes the agent's environment file with AGENT_ARGS extended by extra, as an
// operator changes the agent's flags (/etc/default/placeholder-agent); the unit's next
// start reads it.
func (s *Stack) setAgentArgs(extra ...string) error {
	lease := filepath.Join(s.paths.config, "lease", "kubeconfig")
	args := append([]string{"--lease-kubeconfig=" + lease}, s.agentArgs(extra...)...)
	content := fmt.Sprintf("NODE_NAME=%s\nAGENT_ARGS=%s\n", s.Opts.NodeName, strings.Join(args, " "))
	return os.WriteFile(filepath.Join(s.paths.defaults, "placeholder-agent"), []byte(content), 0o644)
}

// writeSystemctl writes the systemctl the agent finds on its PATH: for node-ctl's unit,
// stop marks it stopped and signals its process (systemctl stop), start clears the mark
// (the supervisor starts it), restart does both (systemctl restart starts a stopped unit);
// the supervisor keeps the process's PID in a file. Anything else fails, naming itself.
func writeSystemctl(p nodePaths) error {
	script := fmt.Sprintf(`#!/bin/sh
# systemctl for the e2e stack's agent (tests/e2e/stack): node-ctl's unit is played by the
# stack's supervisor, which keeps its stopped mark in %[1]s and its PID in %[2]s.
set -e
verb=$1; unit=${2%%.service}
if [ "$#" -ne 2 ] || [ "$unit" != node-ctl ]; then
	echo "systemctl (e2e stack): only start, stop and restart of node-ctl are played here, not: $*" >&2
	exit 1
fi
signal() { pid=$(cat %[2]s 2>/dev/null || true); [ -z "$pid" ] || kill -TERM "$pid"; }
case $verb in
stop) touch %[1]s; signal ;;
start) rm -f %[1]s ;;
restart) rm -f %[1]s; signal ;;
*) echo "systemctl (e2e stack): $verb is not played here" >&2; exit 1 ;;
esac
`, p.nodeCtlHold, p.nodeCtlPid)
	if err := os.MkdirAll(filepath.Dir(p.systemctl), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p.systemctl, []byte(script), 0o755)
}
