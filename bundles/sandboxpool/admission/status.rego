# METADATA
# description: |
#   Status scoping of SandboxPool (docs/design.md §3.2 and §4): who may write a pool's status
#   subresource, and which fields each writer owns.
package sandboxpool.admission.status

import data.sandboxpool.lib.identity
import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.violation

# The controller owns names.controller_status_fields (phase) and
# names.controller_conditions; every other status field (placeholderPod, placeholderAgent,
# override, resize, nodeCtl, poolInfo, lastAppliedGeneration) and condition belongs to the
# node's placeholder agent.
#
# OPA evaluates every rule a decision reads, once, at a cost of several microseconds each
# (docs/benchmarks.md, the policy layer), and the node's status write is the request the
# cluster sends most. So each writer's rules are read only for that writer, and the
# checks compare what the writer may not change before they name it.

# applies is true for an UPDATE of sandboxpools/status (a PATCH arrives as an UPDATE).
applies if {
	request.kind == "pool_status"
	request.is_update
}

# node is the pool's node. spec.nodeName is immutable and a status write cannot change the
# spec, so only the stored (old) object is trusted; without it no node may write.
node := n if {
	n := request.old.spec.nodeName
	is_string(n)
} else := ""

# writer is the role the caller writes as. A caller that is both (a misconfiguration) is
# held to the node's narrower field set.
writer := "node" if {
	node != ""
	identity.is_node(request.user, node)
} else := "controller" if {
	identity.is_controller(request.user)
}

deny contains {"field": "status", "msg": msg} if {
	applies
	not writer
	msg := sprintf(
		"status of pool %s may only be written by node %s or the controller; caller %s is neither",
		[request.name, node, request.username],
	)
}

deny contains v if {
	applies
	writer == "node"
	some v in node_violations
}

deny contains v if {
	applies
	writer == "controller"
	some v in controller_violations
}

old_status := s if {
	s := request.old.status
	is_object(s)
} else := {}

new_status := s if {
	s := request.obj.status
	is_object(s)
} else := {}

old_conditions := object.get(old_status, "conditions", [])

new_conditions := object.get(new_status, "conditions", [])

# conditions returns the conditions of type t in the list cs (at most one in a valid list).
conditions(cs, t) := [c |
	some c in cs
	c.type == t
]

# The node's agent may not touch the controller's fields and conditions.
node_violations contains violation.new(sprintf("status.%s", [key]), msg) if {
	some key in names.controller_status_fields
	object.get(old_status, key, null) != object.get(new_status, key, null)
	msg := sprintf("owned by the controller; node %s (caller %s) may not change it", [node, request.username])
}

# Equal lists hold equal conditions of every type, so the types are compared only when the
# lists differ (most writes leave the conditions alone).
node_violations contains violation.new(sprintf("status.conditions[type=%s]", [t]), msg) if {
	old_conditions != new_conditions
	some t in names.controller_conditions
	conditions(old_conditions, t) != conditions(new_conditions, t)
	msg := sprintf("owned by the controller; node %s (caller %s) may not add, remove or change it", [node, request.username])
}

# The controller may not touch the agent's fields and conditions.
controller_violations contains violation.new(sprintf("status.%s", [key]), msg) if {
	some key in ((object.keys(old_status) | object.keys(new_status)) - names.controller_status_fields)
	key != "conditions"
	object.get(old_status, key, null) != object.get(new_status, key, null)
	msg := sprintf("owned by the placeholder agent of node %s; the controller (caller %s) may not change it", [node, request.username])
}

controller_violations contains violation.new(sprintf("status.conditions[type=%s]", [t]), msg) if {
	old_conditions != new_conditions
	some t in ({c.type | some c in array.concat(old_conditions, new_conditions)} - names.controller_conditions)
	conditions(old_conditions, t) != conditions(new_conditions, t)
	msg := sprintf(
		"owned by the placeholder agent of node %s; the controller (caller %s) may not add, remove or change it",
		[node, request.username],
	)
}

# Ownership. With server-side apply a writer that applies a field with its current value
# becomes a co-owner of it without changing it, and the field's owner can then no longer
# change it without forcing (which neither writer does): the agent could freeze the phase,
# the controller the agent's fields. So neither may claim the other's fields under any
# field manager but the other's. Claims that the stored object already records are left
# alone (only new ones are refused).
node_violations contains violation.new(field, msg) if {
	some [manager, field] in new_claims
	field_owner(field) == "controller"
	manager != names.controller_field_manager
	msg := sprintf("owned by the controller; node %s (caller %s) may not claim it (field manager %s)", [node, request.username, manager])
}

controller_violations contains violation.new(field, msg) if {
	some [manager, field] in new_claims
	field_owner(field) == "agent"
	manager != names.agent_field_manager
	msg := sprintf("owned by the placeholder agent of node %s; the controller (caller %s) may not claim it (field manager %s)", [node, request.username, manager])
}

# new_claims are the claims of request.obj that request.old does not record. An entry's
# claims come from its manager and its fieldsV1 alone, so an entry whose manager and
# fieldsV1 the stored object already holds records nothing new and is not read: a writer
# that applies the same fields again changes only its entry's time.
new_claims := {claim |
	some mf in object.get(request.obj, ["metadata", "managedFields"], [])
	not [mf.manager, mf.fieldsV1] in old_claim_sources
	some claim in entry_claims(mf)
	not claim in claims(request.old)
}

old_claim_sources := {[mf.manager, mf.fieldsV1] | some mf in object.get(request.old, ["metadata", "managedFields"], [])}

# claims are the [field manager, status field] pairs the object's managedFields record, the
# fields named as in the violations above.
claims(obj) := {claim |
	some mf in object.get(obj, ["metadata", "managedFields"], [])
	some claim in entry_claims(mf)
}

# entry_claims are the claims of one managedFields entry.
entry_claims(mf) := {[mf.manager, field] |
	fields := object.get(mf, ["fieldsV1", "f:status"], {})
	is_object(fields)
	some field in status_fields(fields)
}

status_fields(fields) := {sprintf("status.%s", [trim_prefix(key, "f:")]) |
	some key, _ in fields
	startswith(key, "f:")
	key != "f:conditions"
} | {sprintf("status.conditions[type=%s]", [t]) |
	some key, _ in object.get(fields, "f:conditions", {})
	startswith(key, "k:")
	t := json.unmarshal(trim_prefix(key, "k:")).type
}

field_owner(field) := "controller" if {
	some f in names.controller_status_fields
	field == sprintf("status.%s", [f])
} else := "controller" if {
	some t in names.controller_conditions
	field == sprintf("status.conditions[type=%s]", [t])
} else := "agent"
