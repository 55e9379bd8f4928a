package sandboxpool.admission.pool_test

import data.sandboxpool.admission.fixtures_test as fx
import data.sandboxpool.admission.pool

patch(obj, path, value) := json.patch(obj, [{"op": "add", "path": path, "value": value}])

inventory := {"pools": {
	"placeholder-node-a": {"class": "gold", "nodeName": "node-a"},
	"placeholder-node-c": {"class": "default", "nodeName": "node-c"},
}}

test_valid_pool_allowed if {
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-a"))
}

test_long_node_name_hashed_name_allowed if {
	node := concat("", ["a" | some _ in numbers.range(1, 250)])
	obj := patch(fx.pool(node), "/metadata/name", concat("", ["placeholder-", substring(node, 0, 232), "-3f3e35e0"]))
	count(pool.deny) == 0 with input as fx.create_pool(obj)
}

test_wrong_name_denied if {
	obj := patch(fx.pool("node-a"), "/metadata/name", "placeholder-node-b")
	pool.deny == {{
		"field": "metadata.name",
		"msg": "metadata.name: must be the pool name of spec.nodeName (placeholder-node-a)",
	}} with input as fx.create_pool(obj)
}

test_bad_node_name_denied if {
	obj := patch(fx.pool("node-a"), "/spec/nodeName", "Node_A")
	fx.fields(pool.deny) == {"spec.nodeName", "metadata.name"} with input as fx.create_pool(obj)
}

test_missing_node_name_denied if {
	obj := json.remove(fx.pool("node-a"), ["spec/nodeName"])
	fx.fields(pool.deny) == {"spec.nodeName"} with input as fx.create_pool(obj)
}

test_pool_resources_checked if {
	obj := patch(fx.pool("node-a"), "/spec/resourcePolicy/resources", {"cpu": "4", "memory": "0", "hugepages-2Mi": "-2Mi"})
	fx.fields(pool.deny) == {
		"spec.resourcePolicy.resources.memory",
		"spec.resourcePolicy.resources.hugepages-2Mi",
	} with input as fx.create_pool(obj)
}

override(o) := patch(fx.pool("node-a"), "/spec/override", o)

test_override_valid_allowed if {
	obj := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": {"resources": {"cpu": "6", "memory": "12Gi"}}})
	count(pool.deny) == 0 with input as fx.create_pool(obj)
}

test_override_disabled_not_checked if {
	count(pool.deny) == 0 with input as fx.create_pool(override({"enabled": false}))
	count(pool.deny) == 0 with input as fx.create_pool(override({"reason": ""}))
}

test_override_without_reason_denied if {
	obj := override({"enabled": true, "resourcePolicy": {"resources": {"cpu": "6", "memory": "12Gi"}}})
	pool.deny == {{
		"field": "spec.override.reason",
		"msg": "spec.override.reason: field is required but not present",
	}} with input as fx.create_pool(obj)
}

test_override_blank_reason_denied if {
	every reason in ["", "  ", 3] {
		obj := override({"enabled": true, "reason": reason, "resourcePolicy": {"resources": {"cpu": "6", "memory": "12Gi"}}})
		pool.deny == {{
			"field": "spec.override.reason",
			"msg": "spec.override.reason: must not be empty when spec.override.enabled is true",
		}} with input as fx.create_pool(obj)
	}
}

test_override_without_policy_denied if {
	pool.deny == {{
		"field": "spec.override.resourcePolicy",
		"msg": "spec.override.resourcePolicy: field is required but not present",
	}} with input as fx.create_pool(override({"enabled": true, "reason": "OPS-1"}))
}

test_override_policy_not_an_object_denied if {
	obj := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": "big"})
	fx.fields(pool.deny) == {"spec.override.resourcePolicy"} with input as fx.create_pool(obj)
}

test_override_policy_without_resources_denied if {
	obj := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": {}})
	fx.fields(pool.deny) == {"spec.override.resourcePolicy.resources"} with input as fx.create_pool(obj)
}

test_override_bad_resources_denied if {
	obj := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": {"resources": {"cpu": "0"}}})
	fx.fields(pool.deny) == {
		"spec.override.resourcePolicy.resources.cpu",
		"spec.override.resourcePolicy.resources.memory",
	} with input as fx.create_pool(obj)
}

test_endpoint_unix_allowed if {
	count(pool.deny) == 0 with input as fx.create_pool(patch(fx.pool("node-a"), "/spec/nodeCtl", {"endpoint": "unix:///run/node-ctl.sock"}))
	count(pool.deny) == 0 with input as fx.create_pool(patch(fx.pool("node-a"), "/spec/nodeCtl", {}))
}

test_endpoint_not_unix_denied if {
	every ep in ["tcp://10.0.0.1:7070", "unix://", "/run/node-ctl.sock", 7070] {
		pool.deny == {{
			"field": "spec.nodeCtl.endpoint",
			"msg": "spec.nodeCtl.endpoint: must be a unix:// socket address",
		}} with input as fx.create_pool(patch(fx.pool("node-a"), "/spec/nodeCtl", {"endpoint": ep}))
	}
}

test_immutable_fields_denied if {
	old := fx.pool("node-a")
	obj := patch(patch(old, "/spec/nodeName", "node-b"), "/spec/classRef/name", "gold")
	fx.fields(pool.deny) == {"spec.nodeName", "spec.classRef.name", "metadata.name"} with input as fx.update_pool(fx.controller, old, obj)
}

test_immutable_field_message if {
	old := fx.pool("node-a")
	obj := patch(old, "/spec/classRef/name", "gold")
	pool.deny == {{"field": "spec.classRef.name", "msg": "spec.classRef.name: field is immutable"}} with input as fx.update_pool(fx.controller, old, obj)
}

test_controller_and_operator_updates_allowed if {
	old := fx.pool("node-a")
	obj := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": {"resources": {"cpu": "6", "memory": "12Gi"}}})
	count(pool.deny) == 0 with input as fx.update_pool(fx.admin, old, obj)
	count(pool.deny) == 0 with input as fx.update_pool(fx.controller, old, old)
}

test_update_ratchets_existing_violations if {
	old := patch(fx.pool("node-a"), "/spec/nodeCtl", {"endpoint": "tcp://10.0.0.1:7070"})
	obj := patch(old, "/metadata/finalizers", [])
	count(pool.deny) == 0 with input as fx.update_pool(fx.controller, old, obj)
}

test_node_update_of_spec_denied if {
	old := fx.pool("node-a")
	obj := patch(old, "/spec/resourcePolicy/resources/cpu", "64")
	pool.deny == {{
		"field": "spec",
		"msg": "spec: pool placeholder-node-a may not be modified by node identity system:node:node-a; nodes may only write the status subresource",
	}} with input as fx.update_pool(fx.kubelet("node-a"), old, obj)
		with data.config as fx.config
	fx.fields(pool.deny) == {"spec"} with input as fx.update_pool(fx.agent_sa("node-a"), old, obj)
		with data.config as fx.config
}

test_inventory_conflict_denied if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	pool.deny == {{
		"field": "spec.nodeName",
		"msg": "spec.nodeName: node node-a already belongs to class gold (pool placeholder-node-a); class silver cannot also claim it",
	}} with input as fx.create_pool(obj)
		with data.inventory as inventory
}

test_inventory_same_class_or_other_node_allowed if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "gold")
	count(pool.deny) == 0 with input as fx.create_pool(obj) with data.inventory as inventory
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-b")) with data.inventory as inventory
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-c")) with data.inventory as inventory
	count(pool.deny) == 0 with input as fx.create_pool(obj)
}

index := {
	"pools": inventory.pools,
	"nodes": {"node-a": {"placeholder-node-a": "gold"}, "node-c": {"placeholder-node-c": "default"}},
}

test_inventory_index_used if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	fx.fields(pool.deny) == {"spec.nodeName"} with input as fx.create_pool(obj) with data.inventory as index
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-b")) with data.inventory as index

	# The index is trusted over the pools when both are there.
	count(pool.deny) == 0 with input as fx.create_pool(obj) with data.inventory as {"pools": inventory.pools, "nodes": {}}
}

test_inventory_not_checked_on_update if {
	old := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	count(pool.deny) == 0 with input as fx.update_pool(fx.controller, old, old) with data.inventory as inventory
}

test_delete_and_status_not_checked if {
	bad := patch(fx.pool("node-a"), "/metadata/name", "wrong")
	count(pool.deny) == 0 with input as fx.request("sandboxpools", "", "DELETE", fx.kubelet("node-a"), null, bad)
	count(pool.deny) == 0 with input as fx.update_status(fx.kubelet("node-a"), bad, bad)
}
