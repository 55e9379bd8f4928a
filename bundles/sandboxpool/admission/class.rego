# METADATA
# description: Admission rules of SandboxPoolClass (SPEC §3.2).
package sandboxpool.admission.class

import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.resources
import data.sandboxpool.lib.violation

# spec.selector is immutable: a change would delete and create pools en masse, as with
# Deployment.spec.selector.
deny contains violation.new("spec.selector", msg) if {
	request.is_class
	request.is_update
	object.get(request.obj, ["spec", "selector"], null) != object.get(request.old, ["spec", "selector"], null)
	msg := "field is immutable; to change the node set relabel the nodes or recreate the class"
}

# Validity rules are ratcheted like the API server's CRD validation: an UPDATE is denied
# only for violations the old object did not already have, so an object admitted under
# older rules can still get its finalizers and labels edited.
deny contains v if {
	request.is_class
	request.is_write
	some v in violations(request.obj)
	not v in old_violations
}

old_violations := violations(request.old) if request.is_update

else := set()

# violations lists every validity rule obj breaks.
violations(obj) := quota | runtime_class(obj) if {
	quota := resources.violations(
		object.get(obj, ["spec", "resourcePolicy", "resources"], null),
		"spec.resourcePolicy.resources",
	)
}

runtime_class(obj) := {violation.new("spec.placeholderPod.runtimeClassName", "must be a lower-case RFC 1123 subdomain")} if {
	rc := object.get(obj, ["spec", "placeholderPod", "runtimeClassName"], null)
	rc != null
	not names.is_subdomain(rc)
} else := set()
