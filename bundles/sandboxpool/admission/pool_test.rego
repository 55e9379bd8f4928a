package sandboxpool.admission.pool_test

import data.sandboxpool.admission.fixtures_test as fx
import data.sandboxpool.admission.pool

patch(obj, path, value) := json.patch(obj, [{"op": "add", "path": path, "value": value}])

inventory := {"pools": {
	"placeholder-node-a": {"class": "gold", "nodeName": "node-a"},
	"placeholder-node-c": {"class": "default", "nodeName": "node-c"},
}}

deny(user, old, obj) := d if {
	d := pool.deny with input as fx.update_pool(user, old, obj) with data.config as fx.config
}

test_valid_pool_allowed if {
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-a")) with data.config as fx.config
}

# The shape of a pool is the schema's: the policy does not restate it.
test_shape_left_to_the_schema if {
	bad := patch(patch(fx.pool("node-a"), "/metadata/name", "wrong"), "/spec/nodeCtl", {"endpoint": "tcp://10.0.0.1:7070"})
	count(pool.deny) == 0 with input as fx.create_pool(bad) with data.config as fx.config
}

override(o) := patch(fx.pool("node-a"), "/spec/override", o)

enabled := override({"enabled": true, "reason": "OPS-1", "resourcePolicy": {"resources": {"cpu": "6", "memory": "12Gi"}}})

# Immutability is the CRD's (CEL rules generated from @crd(immutable)): the API server
# refuses the change before it calls the webhook.
test_immutable_fields_left_to_the_crd if {
	old := fx.pool("node-a")
	obj := patch(patch(old, "/spec/nodeName", "node-b"), "/spec/classRef/name", "gold")
	count(deny(fx.admin, old, obj)) == 0
}

# A node name of 250 characters, and the pool name naming.PoolName gives it.
long_node := concat("", [concat("", [x | some _ in numbers.range(1, 120); x := "n"]), ".", concat("", [x | some _ in numbers.range(1, 129); x := "x"])])

long_pool_name := concat("", ["placeholder-", substring(long_node, 0, 232), "-", substring(crypto.sha256(long_node), 0, 8)])

long_pool(name) := patch(patch(fx.pool("node-a"), "/spec/nodeName", long_node), "/metadata/name", name)

test_hashed_name_of_a_long_node_name if {
	count(long_node) == 250
	count(pool.deny) == 0 with input as fx.create_pool(long_pool(long_pool_name)) with data.config as fx.config
	truncated := concat("", ["placeholder-", substring(long_node, 0, 241)])
	pool.deny == {{
		"field": "metadata.name",
		"msg": sprintf("metadata.name: must be the pool name of spec.nodeName, hashed as its name is longer than 241 characters: %s", [long_pool_name]),
	}} with input as fx.create_pool(long_pool(truncated)) with data.config as fx.config
}

# Up to 241 characters the name is the CRD's (a CEL rule): the policy leaves it alone.
test_short_node_name_left_to_the_crd if {
	count(pool.deny) == 0 with input as fx.create_pool(patch(fx.pool("node-a"), "/metadata/name", "placeholder-node-b"))
		with data.config as fx.config
}

test_node_update_of_spec_denied if {
	old := fx.pool("node-a")
	obj := patch(old, "/spec/resourcePolicy/resources/cpu", "64")
	deny(fx.kubelet("node-a"), old, obj) == {{
		"field": "spec",
		"msg": "spec: pool placeholder-node-a may not be modified by node identity system:node:node-a; nodes may only write the status subresource",
	}}
	fx.fields(deny({"username": "alice", "groups": ["system:nodes"]}, old, obj)) == {"spec"}
}

test_operator_edits_override if {
	count(deny(fx.operator, fx.pool("node-a"), enabled)) == 0
	count(deny(fx.operator, enabled, fx.pool("node-a"))) == 0
}

test_operator_limited_to_override if {
	old := fx.pool("node-a")
	snapshot := patch(enabled, "/spec/resourcePolicy/resources/cpu", "64")
	deny(fx.operator, old, snapshot) == {{
		"field": "spec.resourcePolicy",
		"msg": "spec.resourcePolicy: the operator role may change spec.override only; olivia may not change this field",
	}}
	fx.fields(deny(fx.operator, old, patch(old, "/spec/nodeCtl", {"endpoint": "unix:///x.sock"}))) == {"spec.nodeCtl"}
	fx.fields(deny(fx.operator, old, patch(old, "/metadata/labels", {"team": "a"}))) == {"metadata.labels"}
	fx.fields(deny(fx.operator, old, patch(old, "/metadata/annotations", {"note": "a"}))) == {"metadata.annotations"}
	fx.fields(deny(fx.operator, patch(old, "/metadata/finalizers", ["x"]), old)) == {"metadata.finalizers"}
	fx.fields(deny(fx.operator, old, patch(old, "/metadata/ownerReferences", [{"name": "x"}]))) == {"metadata.ownerReferences"}
}

test_admin_not_limited if {
	old := fx.pool("node-a")
	count(deny(fx.admin, old, patch(old, "/spec/resourcePolicy/resources/cpu", "64"))) == 0
	count(deny(fx.admin, patch(old, "/metadata/finalizers", ["x"]), old)) == 0
}

test_controller_keeps_off_the_override if {
	deny(fx.controller, fx.pool("node-a"), enabled) == {{
		"field": "spec.override",
		"msg": "spec.override: set by operators; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not change it",
	}}
	resized := patch(enabled, "/spec/resourcePolicy/resources/cpu", "64")
	count(deny(fx.controller, enabled, resized)) == 0
}

ever_ready(obj) := patch(obj, "/metadata/annotations", {"sandbox-pool.io/ever-ready": "true"})

test_markers_are_the_controllers if {
	old := fx.pool("node-a")
	count(deny(fx.controller, old, ever_ready(old))) == 0
	deny(fx.admin, old, ever_ready(old)) == {{
		"field": "metadata.annotations[sandbox-pool.io/ever-ready]",
		"msg": "metadata.annotations[sandbox-pool.io/ever-ready]: the controller's marker; kubernetes-admin may not set, change or remove it",
	}}
	fx.fields(deny(fx.admin, ever_ready(old), old)) == {"metadata.annotations[sandbox-pool.io/ever-ready]"}
	relabelled := patch(old, "/metadata/labels", {"sandbox-pool.io/class": "gold", "sandbox-pool.io/node": "node-a"})
	fx.fields(deny(fx.admin, old, relabelled)) == {"metadata.labels[sandbox-pool.io/class]", "metadata.labels[sandbox-pool.io/node]"}
	count(deny(fx.controller, old, relabelled)) == 0
}

test_markers_on_create if {
	forged := request_as(fx.admin, ever_ready(fx.pool("node-a")))
	fx.fields(pool.deny) == {"metadata.annotations[sandbox-pool.io/ever-ready]"} with input as forged with data.config as fx.config
	labelled := patch(fx.pool("node-a"), "/metadata/labels", {"sandbox-pool.io/class": "default"})
	count(pool.deny) == 0 with input as request_as(fx.admin, labelled) with data.config as fx.config
	count(pool.deny) == 0 with input as fx.create_pool(ever_ready(fx.pool("node-a"))) with data.config as fx.config
}

request_as(user, obj) := fx.request("sandboxpools", "", "CREATE", user, obj, null)

test_inventory_conflict_denied if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	pool.deny == {{
		"field": "spec.nodeName",
		"msg": "spec.nodeName: node node-a already belongs to class gold (pool placeholder-node-a); class silver cannot also claim it",
	}} with input as fx.create_pool(obj)
		with data.inventory as inventory
		with data.config as fx.config
}

test_inventory_same_class_or_other_node_allowed if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "gold")
	count(pool.deny) == 0 with input as fx.create_pool(obj) with data.inventory as inventory with data.config as fx.config
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-b")) with data.inventory as inventory with data.config as fx.config
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-c")) with data.inventory as inventory with data.config as fx.config
	count(pool.deny) == 0 with input as fx.create_pool(obj) with data.config as fx.config
}

index := {
	"pools": inventory.pools,
	"nodes": {"node-a": {"placeholder-node-a": "gold"}, "node-c": {"placeholder-node-c": "default"}},
}

test_inventory_index_used if {
	obj := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	fx.fields(pool.deny) == {"spec.nodeName"} with input as fx.create_pool(obj) with data.inventory as index with data.config as fx.config
	count(pool.deny) == 0 with input as fx.create_pool(fx.pool("node-b")) with data.inventory as index with data.config as fx.config

	# The index is trusted over the pools when both are there.
	count(pool.deny) == 0 with input as fx.create_pool(obj) with data.inventory as {"pools": inventory.pools, "nodes": {}} with data.config as fx.config
}

test_inventory_not_checked_on_update if {
	old := patch(fx.pool("node-a"), "/spec/classRef/name", "silver")
	count(pool.deny) == 0 with input as fx.update_pool(fx.controller, old, old) with data.inventory as inventory with data.config as fx.config
}

test_delete_and_status_not_checked if {
	bad := patch(fx.pool("node-a"), "/spec/nodeName", "other")
	count(pool.deny) == 0 with input as fx.request("sandboxpools", "", "DELETE", fx.kubelet("node-a"), null, bad)
	count(pool.deny) == 0 with input as fx.update_status(fx.kubelet("node-a"), fx.pool("node-a"), bad)
}
