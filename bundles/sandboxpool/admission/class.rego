# METADATA
# description: |
#   Admission rules of SandboxPoolClass that no schema can state: who may change what and
#   the RuntimeClass it names. The shape of a class (resources, names, selectors) and its
#   immutable selector are the CRD's, generated from the CUE schema: the API server has
#   checked them before it calls the webhook.
package sandboxpool.admission.class

import data.sandboxpool.lib.identity
import data.sandboxpool.lib.request
import data.sandboxpool.lib.runtimeclass
import data.sandboxpool.lib.violation

# A class's spec is what cluster admins declare. The controller writes the class's
# finalizer and its status, never the spec (its role may update classes for the finalizer).
deny contains violation.new("spec", msg) if {
	request.is_class
	request.is_update
	identity.is_controller(request.user)
	object.get(request.obj, "spec", null) != object.get(request.old, "spec", null)
	msg := sprintf("declared by cluster admins; the controller (caller %s) may change a class's finalizers and status only", [request.username])
}

# The RuntimeClass of the placeholder pods exists and runs the placeholder runtime
# (lib/runtimeclass.rego).
deny contains v if {
	request.is_class
	some v in runtimeclass.deny
}

# A class's status is the controller's alone (its counts and conditions): no one else
# writes it, so no one else can own a field of it.
status_deny contains violation.new("status", msg) if {
	request.kind == "class_status"
	not identity.is_controller(request.user)
	msg := sprintf("written by the controller only; caller %s is not the controller", [request.username])
}
