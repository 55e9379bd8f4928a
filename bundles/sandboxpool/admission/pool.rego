# METADATA
# description: Admission rules of SandboxPool, main resource (SPEC §3.2).
package sandboxpool.admission.pool

import data.sandboxpool.lib.identity
import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.resources
import data.sandboxpool.lib.violation

# immutable are the spec fields set once by the controller.
immutable := {
	"spec.nodeName": ["spec", "nodeName"],
	"spec.classRef.name": ["spec", "classRef", "name"],
}

deny contains violation.new(field, "field is immutable") if {
	request.is_pool
	request.is_update
	some field, path in immutable
	object.get(request.obj, path, null) != object.get(request.old, path, null)
}

# A node identity (kubelet or per-node agent service account) never updates a pool's
# spec or metadata; it writes only the status subresource.
deny contains {"field": "spec", "msg": msg} if {
	request.is_pool
	request.is_update
	identity.is_any_node(request.user)
	msg := sprintf(
		"spec: pool %s may not be modified by node identity %s; nodes may only write the status subresource",
		[request.name, request.username],
	)
}

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

# Validity rules, ratcheted as in class.rego.
deny contains v if {
	request.is_pool
	request.is_write
	some v in violations(request.obj)
	not v in old_violations
}

old_violations := violations(request.old) if request.is_update

else := set()

# violations lists every validity rule obj breaks.
violations(obj) := (((quota | node_name(obj)) | pool_name(obj)) | override(obj)) | endpoint(obj) if {
	quota := resources.violations(
		object.get(obj, ["spec", "resourcePolicy", "resources"], null),
		"spec.resourcePolicy.resources",
	)
}

node_name(obj) := {violation.new("spec.nodeName", "must be a lower-case RFC 1123 subdomain")} if {
	not names.is_subdomain(object.get(obj, ["spec", "nodeName"], null))
} else := set()

# metadata.name must be the deterministic name of spec.nodeName.
pool_name(obj) := {violation.new("metadata.name", msg)} if {
	node := obj.spec.nodeName
	is_string(node)
	want := names.pool_name(node)
	object.get(obj, ["metadata", "name"], "") != want
	msg := sprintf("must be the pool name of spec.nodeName (%s)", [want])
} else := set()

# An enabled override says why (reason) and what to use instead (resourcePolicy).
override(obj) := reason | policy if {
	object.get(obj, ["spec", "override", "enabled"], false) == true
	o := obj.spec.override
	reason := override_reason(object.get(o, "reason", null))
	policy := override_policy(object.get(o, "resourcePolicy", null))
} else := set()

override_reason(null) := {violation.new("spec.override.reason", "field is required but not present")}

override_reason(r) := {violation.new("spec.override.reason", "must not be empty when spec.override.enabled is true")} if {
	r != null
	not non_blank(r)
}

override_reason(r) := set() if non_blank(r)

non_blank(s) if {
	is_string(s)
	trim_space(s) != ""
}

override_policy(null) := {violation.new("spec.override.resourcePolicy", "field is required but not present")}

override_policy(p) := resources.violations(
	object.get(p, "resources", null),
	"spec.override.resourcePolicy.resources",
) if is_object(p)

override_policy(p) := {violation.new("spec.override.resourcePolicy", "must be an object with resources")} if {
	p != null
	not is_object(p)
}

# node-ctl is reached over a local unix socket only.
endpoint(obj) := {violation.new("spec.nodeCtl.endpoint", "must be a unix:// socket address")} if {
	ep := object.get(obj, ["spec", "nodeCtl", "endpoint"], null)
	ep != null
	not unix_socket(ep)
} else := set()

unix_socket(ep) if {
	is_string(ep)
	regex.match(`^unix://.+`, ep)
}
