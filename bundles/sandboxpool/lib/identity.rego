# METADATA
# description: |
#   Who a caller is: the identity of one node, any node, or the controller. Names of
#   identities come from data.config (supplied by the webhook, outside the bundle roots).
package sandboxpool.lib.identity

# nodes_group is the group of every kubelet (Node authorizer).
nodes_group := "system:nodes"

node_user_prefix := "system:node:"

service_account_user_prefix := "system:serviceaccount:"

# is_node is true when user is the identity of node, either
#   - the kubelet credential: username system:node:<node> in group system:nodes, or
#   - the per-node agent service account:
#     system:serviceaccount:<node_service_account_namespace>:<node_service_account_prefix><node>
#     e.g. system:serviceaccount:sandbox-pool-system:placeholder-agent-node-a for node-a.
# The service-account form is off unless both config values are non-empty.
is_node(user, node) if {
	user.username == concat("", [node_user_prefix, node])
	nodes_group in user.groups
}

is_node(user, node) if user.username == concat("", [node_service_account_base, node])

# is_any_node is true when user is the identity of some node, whichever.
is_any_node(user) if nodes_group in user.groups

is_any_node(user) if startswith(user.username, node_service_account_base)

# is_controller is true when user is the SandboxPool controller.
is_controller(user) if user.username in data.config.controller_usernames

is_controller(user) if {
	some g in user.groups
	g in data.config.controller_groups
}

# node_service_account_base is the username of a per-node service account minus the node
# name; undefined unless both the namespace and the prefix are configured.
node_service_account_base := concat("", [service_account_user_prefix, ns, ":", prefix]) if {
	ns := data.config.node_service_account_namespace
	prefix := data.config.node_service_account_prefix
	is_string(ns)
	is_string(prefix)
	ns != ""
	prefix != ""
}
