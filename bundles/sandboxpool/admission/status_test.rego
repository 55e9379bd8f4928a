package sandboxpool.admission.status_test

import data.sandboxpool.admission.fixtures_test as fx
import data.sandboxpool.admission.status

old := fx.pool_with_status

conditions(list) := json.patch(old, [{"op": "replace", "path": "/status/conditions", "value": list}])

set_status(obj, field, value) := json.patch(obj, [{"op": "add", "path": concat("/", ["", "status", field]), "value": value}])

drop_status(obj, field) := json.remove(obj, [concat("/", ["status", field])])

agent_write := conditions([
	fx.condition("PlaceholderPodReady", "False"),
	fx.condition("NodeCtlHealthy", "True"),
	fx.condition("PlaceholderAgentHealthy", "True"),
	fx.condition("ResizeInProgress", "True"),
])

deny(user, before, after) := d if {
	d := status.deny with input as fx.update_status(user, before, after)
		with data.config as fx.config
}

test_node_writes_own_fields_allowed if {
	obj := set_status(set_status(agent_write, "poolInfo", {"zone": "z2"}), "resize", {"status": "InProgress", "requestedCpu": "8"})
	count(deny(fx.kubelet("node-b"), old, obj)) == 0
}

test_node_first_status_write_allowed if {
	before := fx.pool("node-b")
	obj := json.patch(before, [{"op": "add", "path": "/status", "value": {"conditions": [fx.condition("PlaceholderPodReady", "True")]}}])
	count(deny(fx.kubelet("node-b"), before, obj)) == 0
}

test_other_node_denied if {
	deny(fx.kubelet("node-a"), old, agent_write) == {{
		"field": "status",
		"msg": "status of pool placeholder-node-b may only be written by node node-b or the controller; caller system:node:node-a is neither",
	}}
	fx.fields(deny(fx.lease_sa("node-a"), old, agent_write)) == {"status"}
}

test_node_username_without_nodes_group_denied if {
	user := {"username": "system:node:node-b", "groups": ["system:authenticated"]}
	fx.fields(deny(user, old, agent_write)) == {"status"}
}

test_anyone_else_denied if {
	msgs := {v.msg | some v in deny(fx.admin, old, agent_write)}
	msgs == {"status of pool placeholder-node-b may only be written by node node-b or the controller; caller kubernetes-admin is neither"}
}

# The node's Lease identity is not the node for status: one identity per job.
test_lease_identity_denied if {
	fx.fields(deny(fx.lease_sa("node-b"), old, agent_write)) == {"status"}
	sa := {"username": "system:serviceaccount:sandbox-pool-system:placeholder-agent-node-b", "groups": ["system:serviceaccounts"]}
	fx.fields(deny(sa, old, agent_write)) == {"status"}
}

test_node_may_not_change_phase if {
	obj := set_status(agent_write, "phase", "Degraded")
	deny(fx.kubelet("node-b"), old, obj) == {{
		"field": "status.phase",
		"msg": "status.phase: owned by the controller; node node-b (caller system:node:node-b) may not change it",
	}}
	fx.fields(deny(fx.kubelet("node-b"), old, drop_status(old, "phase"))) == {"status.phase"}
}

test_node_may_not_touch_controller_conditions if {
	changed := conditions([
		fx.condition("PlaceholderPodReady", "True"),
		fx.condition("NodeCtlHealthy", "True"),
		fx.condition("PlaceholderAgentHealthy", "False"),
		fx.condition("NodeNotFound", "False"),
	])
	deny(fx.kubelet("node-b"), old, changed) == {
		{
			"field": "status.conditions[type=PlaceholderAgentHealthy]",
			"msg": "status.conditions[type=PlaceholderAgentHealthy]: owned by the controller; node node-b (caller system:node:node-b) may not add, remove or change it",
		},
		{
			"field": "status.conditions[type=NodeNotFound]",
			"msg": "status.conditions[type=NodeNotFound]: owned by the controller; node node-b (caller system:node:node-b) may not add, remove or change it",
		},
	}
	removed := conditions([fx.condition("PlaceholderPodReady", "True"), fx.condition("NodeCtlHealthy", "True")])
	fx.fields(deny(fx.kubelet("node-b"), old, removed)) == {"status.conditions[type=PlaceholderAgentHealthy]"}
}

# A write without a status removes every field of it: the controller's are refused.
test_node_may_not_drop_the_status if {
	obj := json.remove(old, ["status"])
	fx.fields(deny(fx.kubelet("node-b"), old, obj)) == {
		"status.phase",
		"status.conditions[type=PlaceholderAgentHealthy]",
	}
}

controller_write := set_status(
	conditions([
		fx.condition("PlaceholderPodReady", "True"),
		fx.condition("NodeCtlHealthy", "True"),
		fx.condition("PlaceholderAgentHealthy", "False"),
		fx.condition("NodeNotFound", "True"),
	]),
	"phase", "Unready",
)

test_controller_writes_own_fields_allowed if {
	count(deny(fx.controller, old, controller_write)) == 0
	count(deny(fx.controller_by_group, old, controller_write)) == 0
}

test_controller_may_not_touch_agent_fields if {
	obj := drop_status(set_status(set_status(controller_write, "poolInfo", {"zone": "z2"}), "lastAppliedGeneration", 2), "placeholderPod")
	deny(fx.controller, old, obj) == {
		{
			"field": "status.poolInfo",
			"msg": "status.poolInfo: owned by the placeholder agent of node node-b; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not change it",
		},
		{
			"field": "status.lastAppliedGeneration",
			"msg": "status.lastAppliedGeneration: owned by the placeholder agent of node node-b; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not change it",
		},
		{
			"field": "status.placeholderPod",
			"msg": "status.placeholderPod: owned by the placeholder agent of node node-b; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not change it",
		},
	}
}

test_controller_may_not_touch_agent_conditions if {
	obj := conditions([
		fx.condition("PlaceholderPodReady", "False"),
		fx.condition("PlaceholderAgentHealthy", "True"),
		fx.condition("ResizeDeferred", "True"),
	])
	deny(fx.controller_by_group, old, obj) == {
		{
			"field": "status.conditions[type=PlaceholderPodReady]",
			"msg": "status.conditions[type=PlaceholderPodReady]: owned by the placeholder agent of node node-b; the controller (caller sandboxpool-controller-2) may not add, remove or change it",
		},
		{
			"field": "status.conditions[type=NodeCtlHealthy]",
			"msg": "status.conditions[type=NodeCtlHealthy]: owned by the placeholder agent of node node-b; the controller (caller sandboxpool-controller-2) may not add, remove or change it",
		},
		{
			"field": "status.conditions[type=ResizeDeferred]",
			"msg": "status.conditions[type=ResizeDeferred]: owned by the placeholder agent of node node-b; the controller (caller sandboxpool-controller-2) may not add, remove or change it",
		},
	}
}

test_unchanged_status_allowed_for_both if {
	count(deny(fx.controller, old, old)) == 0
	count(deny(fx.kubelet("node-b"), old, old)) == 0
}

test_only_status_updates_of_pools_scoped if {
	count(status.deny) == 0 with input as fx.update_pool(fx.admin, old, controller_write) with data.config as fx.config
	count(status.deny) == 0 with input as fx.request("sandboxpoolclasses", "status", "UPDATE", fx.admin, fx.class, fx.class)
		with data.config as fx.config
}

test_node_taken_from_stored_object_only if {
	before := json.remove(old, ["spec/nodeName"])
	fx.fields(deny(fx.kubelet("node-b"), before, old)) == {"status"}
	count(deny(fx.controller, before, old)) == 0
}

# managed(obj, entries) is obj with the managedFields entries [manager, fieldsV1 of status].
managed(obj, entries) := json.patch(obj, [{"op": "add", "path": "/metadata/managedFields", "value": [
{"manager": e[0], "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": e[1]}} |
	some e in entries
]}])

agent_fields := {"f:poolInfo": {"f:zone": {}}, "f:conditions": {`k:{"type":"PlaceholderPodReady"}`: {".": {}, "f:status": {}}}}

controller_fields := {"f:phase": {}, "f:conditions": {`k:{"type":"PlaceholderAgentHealthy"}`: {".": {}, "f:status": {}}}}

stored := managed(old, [["placeholder-agent", agent_fields], ["sandboxpool-controller", controller_fields]])

test_node_may_not_claim_controller_fields if {
	claimed := managed(old, [
		["placeholder-agent", object.union(agent_fields, {"f:phase": {}})],
		["sandboxpool-controller", controller_fields],
	])
	deny(fx.kubelet("node-b"), stored, claimed) == {{
		"field": "status.phase",
		"msg": "status.phase: owned by the controller; node node-b (caller system:node:node-b) may not claim it (field manager placeholder-agent)",
	}}
	by_kubectl := managed(old, [
		["placeholder-agent", agent_fields], ["sandboxpool-controller", controller_fields],
		["kubectl", {"f:conditions": {`k:{"type":"NodeNotFound"}`: {}}}],
	])
	fx.fields(deny(fx.kubelet("node-b"), stored, by_kubectl)) == {"status.conditions[type=NodeNotFound]"}
}

test_existing_claims_and_own_manager_allowed if {
	count(deny(fx.kubelet("node-b"), stored, stored)) == 0
	as_controller := managed(old, [["placeholder-agent", agent_fields], ["sandboxpool-controller", object.union(controller_fields, {"f:poolInfo": {}})]])
	count(deny(fx.kubelet("node-b"), stored, as_controller)) == 0
	legacy := managed(old, [["placeholder-agent", object.union(agent_fields, {"f:phase": {}})], ["sandboxpool-controller", controller_fields]])
	count(deny(fx.kubelet("node-b"), legacy, legacy)) == 0
}

test_controller_may_not_claim_agent_fields if {
	claimed := managed(old, [
		["placeholder-agent", agent_fields],
		["sandboxpool-controller", object.union(controller_fields, {"f:poolInfo": {"f:zone": {}}, "f:conditions": {`k:{"type":"NodeCtlHealthy"}`: {}}})],
	])
	deny(fx.controller, stored, claimed) == {
		{
			"field": "status.poolInfo",
			"msg": "status.poolInfo: owned by the placeholder agent of node node-b; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not claim it (field manager sandboxpool-controller)",
		},
		{
			"field": "status.conditions[type=NodeCtlHealthy]",
			"msg": "status.conditions[type=NodeCtlHealthy]: owned by the placeholder agent of node node-b; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may not claim it (field manager sandboxpool-controller)",
		},
	}
}
