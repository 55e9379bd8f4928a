package sandboxpool.lib.identity_test

import data.sandboxpool.lib.identity

config := {
	"controller_usernames": ["ctrl"],
	"controller_groups": ["ctrl-group"],
	"operator_usernames": ["olivia"],
	"operator_groups": ["sandbox-pool:operators"],
}

kubelet := {"username": "system:node:node-a", "groups": ["system:nodes"]}

test_is_node if {
	identity.is_node(kubelet, "node-a")
	not identity.is_node(kubelet, "node-b")
	not identity.is_node({"username": "system:node:node-a", "groups": []}, "node-a")
	not identity.is_node({"username": "system:node:node-a"}, "node-a")
	not identity.is_node({"username": "alice", "groups": ["system:nodes"]}, "node-a")
}

test_service_accounts_are_no_node if {
	sa := {"username": "system:serviceaccount:sandbox-pool-system:placeholder-agent-node-a", "groups": ["system:serviceaccounts"]}
	not identity.is_node(sa, "node-a") with data.config as config
	not identity.is_any_node(sa) with data.config as config
}

test_is_any_node if {
	identity.is_any_node(kubelet)
	identity.is_any_node({"username": "alice", "groups": ["system:nodes"]})
	identity.is_any_node({"username": "system:node:x", "groups": []})
	not identity.is_any_node({"username": "admin", "groups": ["system:masters"]})
}

test_is_controller if {
	identity.is_controller({"username": "ctrl", "groups": []}) with data.config as config
	identity.is_controller({"username": "other", "groups": ["ctrl-group"]}) with data.config as config
	not identity.is_controller({"username": "other", "groups": ["x"]}) with data.config as config
	not identity.is_controller({"username": "ctrl", "groups": []})
}

test_is_operator if {
	identity.is_operator({"username": "olivia", "groups": []}) with data.config as config
	identity.is_operator({"username": "oscar", "groups": ["sandbox-pool:operators"]}) with data.config as config
	not identity.is_operator({"username": "oscar", "groups": ["x"]}) with data.config as config
	not identity.is_operator({"username": "olivia", "groups": []})
}
