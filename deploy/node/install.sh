#!/usr/bin/env bash
# Installs SandboxPool's node half on this node (docs/operator-guide.md, "Node setup"): the
# placeholder shim, node-ctl and placeholder-agent binaries, the containerd drop-in
# (deploy/containerd/placeholder.toml), the systemd units (deploy/node/*.service) and their
# environment files; then reloads systemd, restarts containerd (it reads the drop-in and
# finds the shim) and enables and starts node-ctl and placeholder-agent. Run it as root from
# a checkout of this repository, or from a release's deploy/ tree, with the binaries in BIN:
#
#   make build                                       # or take the release's binaries
#   NODE_NAME=node-a NODE_CTL_ZONE=zone-a LEASE_KUBECONFIG=/etc/sandbox-pool/lease.kubeconfig \
#     deploy/node/install.sh
#
# Running it again installs the given binaries and files again (an upgrade: docs/operator-
# guide.md, "Upgrade") and restarts the services; running placeholder pods keep their shim.
#
# Variables (defaults in brackets). Each path below is written into the installed units and
# drop-in in place of the default, so a node with other paths gets files that name its own:
#   NODE_NAME           the Node object's name [hostname, lower case]; goes to
#                       /etc/default/placeholder-agent
#   NODE_CTL_ZONE       node-ctl's --zone [empty]; goes to /etc/default/node-ctl
#   LEASE_KUBECONFIG    the agent's Lease identity (hack/agent-lease-credentials.sh), needed
#                       where the NodeRestriction admission plugin runs; adds
#                       --lease-kubeconfig to AGENT_ARGS [none]
#   AGENT_ARGS          further flags of the agent [none]; NODE_CTL_ARGS: of node-ctl [none]
#   BIN                 where the binaries are taken from [bin]
#   BIN_DIR             where they are installed, on containerd's PATH [/usr/local/bin]
#   UNIT_DIR            systemd units [/etc/systemd/system]
#   DEFAULT_DIR         the units' environment files [/etc/default]
#   CONTAINERD_CONF_DIR the drop-in, a directory containerd's `imports` reads
#                       [/etc/containerd/conf.d]
#   CONFIG_DIR          node-ctl's config file, the agent's credentials [/etc/sandbox-pool]
#   STATE_DIR           what the agent keeps across its restarts (--state-file)
#                       [/var/lib/sandbox-pool]
#   RUN_DIR             node-ctl's and the agent's sockets [/run/sandbox-pool]
#   KUBELET_KUBECONFIG  the agent's node identity, kubelet's own [/etc/kubernetes/kubelet.conf]
#   MANIFEST_DIR        kubelet's staticPodPath [/etc/kubernetes/manifests]
#   CGROUP_PATH         node-ctl's cgroup, the slice: a child of kubelet's pod root
#                       (/kubepods with the cgroupfs driver, /kubepods.slice with systemd)
#                       [/kubepods/sandbox-pool]
#   SYSTEMCTL           the systemctl to run [systemctl]; empty: install the files only
#                       (then reload systemd, restart containerd and start the two units
#                       yourself)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deploy=$(dirname "$here")

node_name=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
bin=${BIN:-bin}
bin_dir=${BIN_DIR:-/usr/local/bin}
unit_dir=${UNIT_DIR:-/etc/systemd/system}
default_dir=${DEFAULT_DIR:-/etc/default}
containerd_conf_dir=${CONTAINERD_CONF_DIR:-/etc/containerd/conf.d}
config_dir=${CONFIG_DIR:-/etc/sandbox-pool}
state_dir=${STATE_DIR:-/var/lib/sandbox-pool}
run_dir=${RUN_DIR:-/run/sandbox-pool}
kubelet_kubeconfig=${KUBELET_KUBECONFIG:-/etc/kubernetes/kubelet.conf}
manifest_dir=${MANIFEST_DIR:-/etc/kubernetes/manifests}
cgroup_path=${CGROUP_PATH:-/kubepods/sandbox-pool}
systemctl=${SYSTEMCTL-systemctl}

agent_args=${AGENT_ARGS:-}
if [[ -n ${LEASE_KUBECONFIG:-} ]]; then
	agent_args="--lease-kubeconfig=$LEASE_KUBECONFIG${agent_args:+ $agent_args}"
fi

for b in containerd-shim-placeholder-v2 node-ctl placeholder-agent; do
	if [[ ! -x $bin/$b ]]; then
		echo "install.sh: $bin/$b is missing (make build, or set BIN to the directory of the binaries)" >&2
		exit 1
	fi
done
for v in bin_dir unit_dir default_dir containerd_conf_dir config_dir state_dir run_dir kubelet_kubeconfig manifest_dir cgroup_path; do
	if [[ ${!v} != /* || ${!v} == *[[:space:]\#\&\\]* ]]; then
		echo "install.sh: ${v^^} must be an absolute path without spaces, '#', '&' or '\\': ${!v}" >&2
		exit 1
	fi
done

# The units and the drop-in name the default paths; each is replaced by the one given.
# The patterns end where the paths end, so that /kubepods/sandbox-pool does not match
# another path.
rewrite() {
	sed -e "s#/usr/local/bin/#$bin_dir/#g" \
		-e "s#/run/sandbox-pool/#$run_dir/#g" \
		-e "s#/etc/sandbox-pool/#$config_dir/#g" \
		-e "s#/var/lib/sandbox-pool/#$state_dir/#g" \
		-e "s#/etc/default/#$default_dir/#g" \
		-e "s#/etc/kubernetes/kubelet.conf#$kubelet_kubeconfig#g" \
		-e "s#/etc/kubernetes/manifests#$manifest_dir#g" \
		-e "s#--cgroup-path=/kubepods/sandbox-pool #--cgroup-path=$cgroup_path #g" \
		"$1"
}

# install_file MODE SOURCE DEST: writes DEST through a temporary file and a rename, so a
# running service never reads a half-written file.
install_file() {
	local tmp
	tmp=$(mktemp "$3.XXXXXX")
	cat "$2" >"$tmp"
	chmod "$1" "$tmp"
	mv -f "$tmp" "$3"
}

echo ">> binaries into $bin_dir"
mkdir -p "$bin_dir"
for b in containerd-shim-placeholder-v2 node-ctl placeholder-agent; do
	install_file 0755 "$bin/$b" "$bin_dir/$b"
done

echo ">> containerd drop-in into $containerd_conf_dir"
mkdir -p "$containerd_conf_dir"
install_file 0644 <(rewrite "$deploy/containerd/placeholder.toml") "$containerd_conf_dir/placeholder.toml"

echo ">> units into $unit_dir, their environment into $default_dir"
mkdir -p "$unit_dir" "$default_dir" "$config_dir" "$state_dir" "$run_dir"
for u in node-ctl placeholder-agent; do
	install_file 0644 <(rewrite "$here/$u.service") "$unit_dir/$u.service"
done
install_file 0644 <(printf 'NODE_CTL_ZONE=%s\nNODE_CTL_ARGS=%s\n' "${NODE_CTL_ZONE:-}" "${NODE_CTL_ARGS:-}") "$default_dir/node-ctl"
install_file 0644 <(printf 'NODE_NAME=%s\nAGENT_ARGS=%s\n' "$node_name" "$agent_args") "$default_dir/placeholder-agent"

if [[ -z $systemctl ]]; then
	echo ">> SYSTEMCTL is empty: reload systemd, restart containerd and start node-ctl and placeholder-agent yourself"
	exit 0
fi
echo ">> starting: containerd (restarted for the drop-in), node-ctl, placeholder-agent"
"$systemctl" daemon-reload
"$systemctl" restart containerd
"$systemctl" enable node-ctl placeholder-agent
"$systemctl" restart node-ctl placeholder-agent
