package sandboxpool.lib.managers_test

import data.sandboxpool.admission
import data.sandboxpool.admission.fixtures_test as fx
import data.sandboxpool.lib.managers

t0 := "2026-11-29T10:00:00Z"

t1 := "2026-11-29T10:00:10Z"

entry(manager, op, sub, time, fields) := object.union(
	{"manager": manager, "operation": op, "apiVersion": "sandboxpool.agentcube.volcano.sh/v1alpha1", "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields},
	{k: v | some k, v in {"subresource": sub}; sub != ""},
)

controller_spec := entry("sandboxpool-controller", "Update", "", t0, {"f:metadata": {
	"f:finalizers": {".": {}, "v:\"sandboxpool.agentcube.volcano.sh/placeholder-pod\"": {}},
	"f:ownerReferences": {".": {}, "k:{\"uid\":\"class-uid\"}": {}},
}})

controller_status := entry("sandboxpool-controller", "Apply", "status", t0, {"f:status": {"f:phase": {}}})

agent_status := entry("placeholder-agent", "Apply", "status", t0, {"f:status": {"f:poolInfo": {"f:zone": {}}}})

with_fields(obj, entries) := json.patch(obj, [{"op": "add", "path": "/metadata/managedFields", "value": entries}])

stored := with_fields(fx.pool_with_status, [controller_spec, controller_status, agent_status])

# write is an UPDATE of pool node-b's status (sub "status") or main resource (sub "") by
# user, whose new object holds entries, naming field manager m in its options ("" for none).
write(sub, user, entries, m) := object.union(
	fx.request("sandboxpools", sub, "UPDATE", user, with_fields(fx.pool_with_status, entries), stored),
	{"request": {"options": {k: v | some k, v in {"fieldManager": m}; m != ""}}},
)

fields(req) := f if {
	f := {v.field | some v in managers.deny} with input as req with data.config as fx.config
}

msgs(req) := m if {
	m := {v.msg | some v in managers.deny} with input as req with data.config as fx.config
}

test_writers_under_their_own_names_allowed if {
	agent_now := entry("placeholder-agent", "Apply", "status", t1, {"f:status": {"f:poolInfo": {"f:zone": {}, "f:allocatedMemoryBytes": {}}}})
	count(fields(write("status", fx.kubelet("node-b"), [controller_spec, controller_status, agent_now], "placeholder-agent"))) == 0
	ctrl_now := entry("sandboxpool-controller", "Apply", "status", t1, {"f:status": {"f:phase": {}}})
	count(fields(write("status", fx.controller, [controller_spec, ctrl_now, agent_status], "sandboxpool-controller"))) == 0
}

test_node_names_the_controller_as_its_field_manager if {
	ctrl_now := entry("sandboxpool-controller", "Apply", "status", t1, {"f:status": {"f:phase": {}, "f:poolInfo": {"f:zone": {}}}})
	req := write("status", fx.kubelet("node-b"), [controller_spec, ctrl_now, agent_status], "sandboxpool-controller")
	fields(req) == {"metadata.managedFields[manager=sandboxpool-controller]"}
	msgs(req) == {
		"metadata.managedFields[manager=sandboxpool-controller]: the controller writes under this field manager only; caller system:node:node-b may not",
		"metadata.managedFields[manager=sandboxpool-controller]: the controller writes under this field manager only; caller system:node:node-b may not (a client without a field manager is named after its user agent)",
	}
}

# A client without fieldManager writes under its user agent's name.
test_user_agent_named_after_the_controller if {
	ua := entry("sandboxpool-controller", "Update", "status", t1, {"f:status": {"f:poolInfo": {"f:zone": {}}}})
	fields(write("status", fx.kubelet("node-b"), [controller_spec, controller_status, agent_status, ua], "")) == {"metadata.managedFields[manager=sandboxpool-controller]"}
}

test_controller_and_others_under_the_agents_name if {
	agent_now := entry("placeholder-agent", "Apply", "status", t1, {"f:status": {"f:poolInfo": {"f:zone": {}}}})
	fields(write("status", fx.controller, [controller_spec, controller_status, agent_now], "placeholder-agent")) == {"metadata.managedFields[manager=placeholder-agent]"}
	fields(write("status", fx.kubelet("node-a"), [controller_spec, controller_status, agent_now], "placeholder-agent")) == {"metadata.managedFields[manager=placeholder-agent]"}
	fields(write("", fx.admin, [controller_spec, controller_status, agent_now], "placeholder-agent")) == {"metadata.managedFields[manager=placeholder-agent]"}
}

test_managed_fields_edit_moving_the_phase_refused if {
	moved := [controller_spec, agent_status, entry("olivia-tool", "Update", "", t1, {"f:status": {"f:phase": {}}})]
	msgs(write("", fx.operator, moved, "")) == {"metadata.managedFields: status.phase is owned by the controller (field manager sandboxpool-controller); caller olivia may not give it to field manager olivia-tool (its next apply would conflict)"}
	co_owned := [controller_spec, controller_status, agent_status, entry("kubectl", "Apply", "", t1, {"f:status": {"f:poolInfo": {"f:zone": {}}}})]
	fields(write("", fx.admin, co_owned, "kubectl")) == {"metadata.managedFields"}
}

test_managed_fields_edit_growing_a_writers_entry_refused if {
	grown := [controller_spec, entry("sandboxpool-controller", "Apply", "status", t0, {"f:status": {"f:phase": {}}, "f:spec": {"f:override": {}}}), agent_status]
	msgs(write("", fx.admin, grown, "")) == {"metadata.managedFields[manager=sandboxpool-controller]: caller kubernetes-admin may not give the controller the field spec.override (its next apply would remove it)"}
}

test_fields_removed_with_their_values_allowed if {
	# The garbage collector orphans the pool, an admin removes the finalizer: the
	# controller's entry shrinks, nobody else owns what it lost.
	orphaned := entry("sandboxpool-controller", "Update", "", t0, {"f:metadata": {"f:finalizers": {".": {}, "v:\"sandboxpool.agentcube.volcano.sh/placeholder-pod\"": {}}}})
	count(fields(write("", {"username": "system:serviceaccount:kube-system:generic-garbage-collector", "groups": []}, [orphaned, controller_status, agent_status], ""))) == 0
	labelled := [controller_spec, controller_status, agent_status, entry("kubectl-label", "Update", "", t1, {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}})]
	count(fields(write("", fx.admin, labelled, ""))) == 0
}

test_status_claims_left_to_the_status_rules if {
	claim := [controller_spec, controller_status, entry("placeholder-agent", "Apply", "status", t1, {"f:status": {"f:phase": {}, "f:poolInfo": {"f:zone": {}}}})]
	count(fields(write("status", fx.kubelet("node-b"), claim, "placeholder-agent"))) == 0
}

test_class_status_is_the_controllers if {
	req := fx.request("sandboxpoolclasses", "status", "UPDATE", fx.admin, fx.class, fx.class)
	{v.msg | some v in admission.deny} == {"status: written by the controller only; caller kubernetes-admin is not the controller"} with input as req with data.config as fx.config
	count(admission.deny) == 0 with input as fx.request("sandboxpoolclasses", "status", "UPDATE", fx.controller, fx.class, fx.class)
		with data.config as fx.config
}
