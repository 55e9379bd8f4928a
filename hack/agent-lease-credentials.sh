#!/usr/bin/env bash
# The Lease identity of one node's placeholder-agent, for clusters with the NodeRestriction
# admission plugin (docs/operator-guide.md, "Node identity"). Run it with cluster-admin
# kubectl; it creates the node's service account
# sandbox-pool-node-lease/placeholder-agent-<node> (the RoleBindings of deploy/rbac grant its
# namespace's service accounts the pools' Leases and their own tokens, nothing else), asks
# the API server for its first token, and writes into DIR (default
# _output/lease-credentials/<node>):
#
#   token        the service account's token (TokenRequest), valid DURATION (default 1h):
#                bound to the Node object <node> when it exists, so it ends when the Node
#                is deleted; else bound to nothing, and then good for one thing only: the
#                agent exchanges it for a token bound to its Node once the node has
#                registered (the node policy refuses it every Lease write)
#   kubeconfig   the API server of the current context, its CA, and tokenFile: token
#
# Copy both to the node, e.g. /etc/sandbox-pool/lease/token and
# /etc/sandbox-pool/lease/kubeconfig (pass TOKEN_PATH=/etc/sandbox-pool/lease/token here so
# the kubeconfig names it), and add --lease-kubeconfig=/etc/sandbox-pool/lease/kubeconfig to
# AGENT_ARGS, before DURATION has passed. The agent then keeps its own token: before it
# expires it requests the next one, bound to its Node, and writes it to tokenFile (which
# must be writable by the agent). Run this again only when that chain broke (the agent was
# stopped for longer than a token lives, or the Node was deleted and registered again).
#
# REVOKE=1 deletes and creates the service account again first: every token it was issued
# before stops working at once (a leaked one, or the year-long unbound ones this script
# made before tokens were bound to the Node).
#
#   hack/agent-lease-credentials.sh node-a
set -euo pipefail
node=${1:?usage: $0 NODE [DIR]}
dir=${2:-_output/lease-credentials/$node}
kubectl=${KUBECTL:-kubectl}
ns=${NAMESPACE:-sandbox-pool-node-lease}
sa=${SA_PREFIX:-placeholder-agent-}$node
duration=${DURATION:-1h}
mkdir -p "$dir"
umask 077

if [ "${REVOKE:-}" = 1 ]; then
  "$kubectl" -n "$ns" delete serviceaccount "$sa" --ignore-not-found >/dev/null
fi
"$kubectl" -n "$ns" create serviceaccount "$sa" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
if uid=$("$kubectl" get node "$node" -o jsonpath='{.metadata.uid}' 2>/dev/null) && [ -n "$uid" ]; then
  bound="bound to Node $node"
  "$kubectl" -n "$ns" create token "$sa" --duration="$duration" \
    --bound-object-kind Node --bound-object-name "$node" --bound-object-uid "$uid" > "$dir/token"
else
  bound="bound to nothing (Node $node does not exist yet): the agent exchanges it for one bound to its Node once it registers"
  "$kubectl" -n "$ns" create token "$sa" --duration="$duration" > "$dir/token"
fi

server=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
ca=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca" ]; then
  cafile=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  ca=$(base64 -w0 < "$cafile")
fi
cat > "$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: $sa
  user:
    tokenFile: ${TOKEN_PATH:-$(cd "$dir" && pwd)/token}
contexts:
- name: lease
  context: {cluster: cluster, user: $sa}
current-context: lease
KC
echo "wrote $dir/kubeconfig and $dir/token for system:serviceaccount:$ns:$sa, valid $duration, $bound"
