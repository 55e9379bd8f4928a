package sandboxpool.lib.identity_test

import data.sandboxpool.lib.identity

config := {
	"controller_usernames": ["ctrl"],
	"controller_groups": ["ctrl-group"],
	"node_service_account_namespace": "sandbox-pool-system",
	"node_service_account_prefix": "placeholder-agent-",
}

kubelet := {"username": "system:node:node-a", "groups": ["system:nodes"]}

agent := {"username": "system:serviceaccount:sandbox-pool-system:placeholder-agent-node-a", "groups": []}

test_is_node if {
	identity.is_node(kubelet, "node-a") with data.config as config
	identity.is_node(agent, "node-a") with data.config as config
	not identity.is_node(kubelet, "node-b") with data.config as config
	not identity.is_node(agent, "node-b") with data.config as config
	not identity.is_node({"username": "system:node:node-a", "groups": []}, "node-a") with data.config as config
	not identity.is_node({"username": "system:serviceaccount:other:placeholder-agent-node-a"}, "node-a") with data.config as config
}

test_service_account_off_without_config if {
	not identity.is_node(agent, "node-a")
	not identity.is_node(agent, "node-a") with data.config as object.union(config, {"node_service_account_namespace": ""})
	not identity.is_node(agent, "node-a") with data.config as object.union(config, {"node_service_account_prefix": 1})
	not identity.is_any_node(agent)
}

test_is_any_node if {
	identity.is_any_node(kubelet)
	identity.is_any_node(agent) with data.config as config
	not identity.is_any_node({"username": "admin", "groups": ["system:masters"]}) with data.config as config
}

test_is_controller if {
	identity.is_controller({"username": "ctrl", "groups": []}) with data.config as config
	identity.is_controller({"username": "other", "groups": ["ctrl-group"]}) with data.config as config
	not identity.is_controller({"username": "other", "groups": ["x"]}) with data.config as config
	not identity.is_controller({"username": "ctrl", "groups": []})
}
