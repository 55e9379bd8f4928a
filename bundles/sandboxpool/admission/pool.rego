# METADATA
# description: |
#   Admission rules of SandboxPool, main resource, that no schema can state: who may change
#   which field, the cluster's other pools, the RuntimeClass it names, and the hashed name
#   of a node whose name is too long for CEL to check. The shape of a pool (name, resources,
#   override, endpoint) and its immutable fields are the CRD's, generated from the CUE
#   schema: the API server has checked them before it calls the webhook.
package sandboxpool.admission.pool

import data.sandboxpool.lib.identity
import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.runtimeclass
import data.sandboxpool.lib.violation

# A pool's name is the deterministic name of its node (#PoolName in schema/sandboxpool.cue,
# naming.PoolName in Go). The CRD's CEL rule holds it for node names of up to 241
# characters; a longer node name is cut and hashed, and CEL has no hash, so this rule holds
# the rest. The name and spec.nodeName never change after the CREATE.
deny contains violation.new("metadata.name", msg) if {
	request.is_pool
	request.is_create
	node := request.obj.spec.nodeName
	count(node) > names.max_unhashed_node_name
	want := concat("", [
		names.pool_name_prefix, substring(node, 0, names.hashed_node_name_prefix),
		"-", substring(crypto.sha256(node), 0, names.hash_suffix),
	])
	request.name != want
	msg := sprintf("must be the pool name of spec.nodeName, hashed as its name is longer than %d characters: %s", [names.max_unhashed_node_name, want])
}

# A node identity never updates a pool's spec or metadata; it writes only the status
# subresource.
deny contains {"field": "spec", "msg": msg} if {
	request.is_pool
	request.is_update
	identity.is_any_node(request.user)
	msg := sprintf(
		"spec: pool %s may not be modified by node identity %s; nodes may only write the status subresource",
		[request.name, request.username],
	)
}

# The operator role exists to give one node an exception, spec.override. The rest of the
# spec is the controller's snapshot of the class (a change would be written back, and the
# placeholder pod rebuilt twice), and the metadata is the controller's too.
deny contains violation.new(field, msg) if {
	request.is_pool
	request.is_update
	identity.is_operator(request.user)
	not identity.is_controller(request.user)
	some field in changed_outside_override
	msg := sprintf("the operator role may change spec.override only; %s may not change this field", [request.username])
}

# operator_metadata are the metadata fields a writer of the main resource can set, with
# the value that stands for "none".
operator_metadata := {"labels": {}, "annotations": {}, "finalizers": [], "ownerReferences": []}

changed_outside_override contains sprintf("spec.%s", [key]) if {
	new_spec := object.get(request.obj, "spec", {})
	old_spec := object.get(request.old, "spec", {})
	some key in (object.keys(new_spec) | object.keys(old_spec))
	key != "override"
	object.get(new_spec, key, null) != object.get(old_spec, key, null)
}

changed_outside_override contains sprintf("metadata.%s", [key]) if {
	some key, none in operator_metadata
	object.get(request.obj, ["metadata", key], none) != object.get(request.old, ["metadata", key], none)
}

# spec.override is the operators'; the controller, which keeps the rest of the spec in
# step with the class, never changes it.
deny contains violation.new("spec.override", msg) if {
	request.is_pool
	request.is_update
	identity.is_controller(request.user)
	object.get(request.obj, ["spec", "override"], null) != object.get(request.old, ["spec", "override"], null)
	msg := sprintf("set by operators; the controller (caller %s) may not change it", [request.username])
}

# The controller's markers: it alone sets, changes or removes them. The ever-ready
# annotation decides between Pending and Unready for a pool that does not serve; the class
# and node labels are what `kubectl get -l` and the alerts select pools by.
marker_annotations := {names.ever_ready}

marker_labels := {names.class_label, names.node_label}

deny contains violation.new(sprintf("metadata.annotations[%s]", [key]), marker_msg) if {
	request.is_pool
	request.is_write
	not identity.is_controller(request.user)
	some key in marker_annotations
	object.get(request.obj, ["metadata", "annotations", key], null) != object.get(old_object, ["metadata", "annotations", key], null)
}

deny contains violation.new(sprintf("metadata.labels[%s]", [key]), marker_msg) if {
	request.is_pool
	request.is_update
	not identity.is_controller(request.user)
	some key in marker_labels
	object.get(request.obj, ["metadata", "labels", key], null) != object.get(request.old, ["metadata", "labels", key], null)
}

marker_msg := sprintf("the controller's marker; %s may not set, change or remove it", [request.username])

# old_object is the object before an UPDATE, and nothing before a CREATE.
old_object := request.old if request.is_update

else := {}

# One class per node, defence in depth (not atomic: the deterministic name is): a CREATE
# is denied when data.inventory already holds a pool of another class for the node.
deny contains violation.new("spec.nodeName", msg) if {
	request.is_pool
	request.is_create
	node := request.obj.spec.nodeName
	class := object.get(request.obj, ["spec", "classRef", "name"], "")
	some existing, existing_class in pools_on_node(node)
	existing_class != class
	msg := sprintf(
		"node %s already belongs to class %s (pool %s); class %s cannot also claim it",
		[node, existing_class, existing, class],
	)
}

# pools_on_node maps the name of every inventoried pool of node to its class.
# data.inventory.nodes (node name -> pool name -> class) is the index of data.inventory.pools
# that the Go engine keeps beside it, so that a CREATE costs a lookup, not a scan of every
# pool; whoever supplies only data.inventory.pools gets the scan.
pools_on_node(node) := object.get(data.inventory.nodes, node, {}) if {
	is_object(data.inventory.nodes)
} else := {name: pool.class |
	some name, pool in data.inventory.pools
	pool.nodeName == node
}

# The RuntimeClass of the placeholder pods exists and runs the placeholder runtime
# (lib/runtimeclass.rego).
deny contains v if {
	request.is_pool
	some v in runtimeclass.deny
}
