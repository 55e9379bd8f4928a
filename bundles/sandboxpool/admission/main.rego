# METADATA
# description: |
#   Entry point of the SandboxPool admission policy. data.sandboxpool.admission.deny is the
#   set of {"field", "msg"} violations of input.request; an empty set allows the request.
package sandboxpool.admission

import data.sandboxpool.admission.class
import data.sandboxpool.admission.pool
import data.sandboxpool.admission.status
import data.sandboxpool.lib.managers
import data.sandboxpool.lib.request

# METADATA
# entrypoint: true
deny contains v if {
	request.kind == "class"
	some v in class.deny
}

deny contains v if {
	request.kind == "pool"
	some v in pool.deny
}

deny contains v if {
	request.kind == "pool_status"
	some v in status.deny
}

deny contains v if {
	request.kind == "class_status"
	some v in class.status_deny
}

# Field ownership, on every kind (lib/managers.rego).
deny contains v if {
	request.kind
	some v in managers.deny
}
