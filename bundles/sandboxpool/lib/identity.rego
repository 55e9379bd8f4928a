# METADATA
# description: |
#   Who a caller is: the identity of one node, any node, the controller or an operator.
#   Names of identities come from data.config (supplied by the webhook, outside the bundle
#   roots).
package sandboxpool.lib.identity

# nodes_group is the group of every kubelet (Node authorizer).
nodes_group := "system:nodes"

node_user_prefix := "system:node:"

# is_node is true when user is the identity of node: the kubelet credential, username
# system:node:<node> in group system:nodes, as the Node authorizer recognises it. The
# agents write status with it (docs/operator-guide.md, "Node identity").
is_node(user, node) if {
	user.username == concat("", [node_user_prefix, node])
	nodes_group in user.groups
}

# is_any_node is true when user is, or claims to be, the identity of some node.
is_any_node(user) if nodes_group in user.groups

is_any_node(user) if startswith(user.username, node_user_prefix)

# is_controller is true when user is the SandboxPool controller.
is_controller(user) if user.username in data.config.controller_usernames

is_controller(user) if {
	some g in user.groups
	g in data.config.controller_groups
}

# is_operator is true when user holds the operator role (sandbox-pool-operator): the
# identities the webhook is told bind it (deploy/rbac binds it to a group).
is_operator(user) if user.username in data.config.operator_usernames

is_operator(user) if {
	some g in user.groups
	g in data.config.operator_groups
}
