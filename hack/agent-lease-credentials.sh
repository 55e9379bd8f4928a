#!/usr/bin/env bash
# The Lease identity of one node's placeholder-agent, for clusters with the NodeRestriction
# admission plugin (docs/operator-guide.md, "Node identity"). Run it with cluster-admin
# kubectl; it creates the node's service account
# sandbox-pool-node-lease/placeholder-agent-<node> (the RoleBinding of deploy/rbac grants its
# namespace's service accounts the pools' Leases and nothing else), asks the API server for
# a token, and writes into DIR (default _output/lease-credentials/<node>):
#
#   token        the service account token (TokenRequest, valid DURATION, default 8760h
#                unless the API server's --service-account-max-token-expiration caps it)
#   kubeconfig   the API server of the current context, its CA, and tokenFile: token
#
# Copy both to the node, e.g. /etc/sandbox-pool/lease-token and
# /etc/sandbox-pool/lease.kubeconfig (then set tokenFile to that path, or pass
# TOKEN_PATH=/etc/sandbox-pool/lease-token here), and add
# --lease-kubeconfig=/etc/sandbox-pool/lease.kubeconfig to AGENT_ARGS. The agent re-reads
# the token file, so rotating it is running this again and copying the token before it
# expires; no restart.
#
#   hack/agent-lease-credentials.sh node-a
set -euo pipefail
node=${1:?usage: $0 NODE [DIR]}
dir=${2:-_output/lease-credentials/$node}
kubectl=${KUBECTL:-kubectl}
ns=${NAMESPACE:-sandbox-pool-node-lease}
sa=${SA_PREFIX:-placeholder-agent-}$node
duration=${DURATION:-8760h}
mkdir -p "$dir"
umask 077

"$kubectl" -n "$ns" create serviceaccount "$sa" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" -n "$ns" create token "$sa" --duration="$duration" > "$dir/token"

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
echo "wrote $dir/kubeconfig and $dir/token for system:serviceaccount:$ns:$sa"
