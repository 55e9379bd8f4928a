# METADATA
# description: |
#   The RuntimeClass a class or a pool names for its placeholder pods
#   (spec.placeholderPod.runtimeClassName) must exist and run the placeholder shim's runtime
#   handler: kubelet admits a static pod whose RuntimeClass is missing or runs another
#   handler, counts it, and cannot run it, and the lock can neither grow nor shrink past it.
#   Checked against data.inventory.runtime_classes (name -> {"handler"}), which the webhook
#   fills from a RuntimeClass informer, when the engine keeps one
#   (data.inventory.runtime_classes_synced is then defined: false until the informer's first
#   list is in, when every named RuntimeClass is refused, never let through unchecked).
#   Checked on CREATE and when an UPDATE changes the name: a RuntimeClass deleted later does
#   not block the object's other writes.
package sandboxpool.lib.runtimeclass

import data.sandboxpool.lib.names
import data.sandboxpool.lib.request
import data.sandboxpool.lib.violation

field := "spec.placeholderPod.runtimeClassName"

path := ["spec", "placeholderPod", "runtimeClassName"]

# named is the RuntimeClass the request sets: on a CREATE, or changed by an UPDATE.
named := n if {
	n := object.get(request.obj, path, null)
	is_string(n)
	sets(n)
}

sets(_) if request.is_create

sets(n) if {
	request.is_update
	object.get(request.old, path, null) != n
}

# synced is data.inventory.runtime_classes_synced, null when the engine keeps no
# RuntimeClasses (the offline sandboxpool vet).
synced := object.get(data.inventory, "runtime_classes_synced", null)

deny contains violation.new(field, msg) if {
	synced == false
	msg := sprintf("cannot check RuntimeClass %q yet: the webhook has not read the cluster's RuntimeClasses; retry", [named])
}

deny contains violation.new(field, msg) if {
	synced == true
	not data.inventory.runtime_classes[named]
	msg := sprintf(
		"RuntimeClass %q does not exist; name one whose handler is %q (deploy/runtimeclass.yaml makes %q)",
		[named, names.runtime_handler, names.runtime_handler],
	)
}

deny contains violation.new(field, msg) if {
	synced == true
	handler := data.inventory.runtime_classes[named].handler
	handler != names.runtime_handler
	msg := sprintf(
		"RuntimeClass %q runs handler %q, not the placeholder runtime's %q: kubelet could not run the placeholder pods",
		[named, handler, names.runtime_handler],
	)
}
