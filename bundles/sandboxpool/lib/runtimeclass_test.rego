package sandboxpool.lib.runtimeclass_test

import data.sandboxpool.admission.class
import data.sandboxpool.admission.fixtures_test as fx
import data.sandboxpool.admission.pool
import data.sandboxpool.lib.runtimeclass

# classes is a synced RuntimeClass inventory: the placeholder runtime's and runc's.
classes := {
	"runtime_classes": {"placeholder": {"handler": "placeholder"}, "fast": {"handler": "placeholder"}, "runc": {"handler": "runc"}},
	"runtime_classes_synced": true,
}

named(obj, rc) := json.patch(obj, [{"op": "add", "path": "/spec/placeholderPod", "value": {"runtimeClassName": rc}}])

msgs(violations) := {v.msg | some v in violations}

test_existing_placeholder_runtime_class_allowed if {
	count(class.deny) == 0 with input as fx.create_class(named(fx.class, "placeholder")) with data.inventory as classes
	count(class.deny) == 0 with input as fx.create_class(named(fx.class, "fast")) with data.inventory as classes
	count(pool.deny) == 0 with input as fx.create_pool(named(fx.pool("node-a"), "fast")) with data.inventory as classes
}

test_missing_runtime_class_denied if {
	msgs(class.deny) == {`spec.placeholderPod.runtimeClassName: RuntimeClass "probe-missing" does not exist; name one whose handler is "placeholder" (deploy/runtimeclass.yaml makes "placeholder")`} with input as fx.create_class(named(fx.class, "probe-missing"))
		with data.inventory as classes
	fx.fields(pool.deny) == {"spec.placeholderPod.runtimeClassName"} with input as fx.create_pool(named(fx.pool("node-a"), "probe-missing"))
		with data.inventory as classes
}

test_other_handler_denied if {
	msgs(class.deny) == {`spec.placeholderPod.runtimeClassName: RuntimeClass "runc" runs handler "runc", not the placeholder runtime's "placeholder": kubelet could not run the placeholder pods`} with input as fx.create_class(named(fx.class, "runc"))
		with data.inventory as classes
}

test_update_checks_a_changed_name_only if {
	old := named(fx.class, "gone")

	# gone does not exist (any more): other changes of the class still go through.
	resized := json.patch(old, [{"op": "replace", "path": "/spec/resourcePolicy/resources/cpu", "value": "8"}])
	count(class.deny) == 0 with input as fx.update_class(old, resized) with data.inventory as classes
	fx.fields(class.deny) == {"spec.placeholderPod.runtimeClassName"} with input as fx.update_class(named(fx.class, "placeholder"), named(fx.class, "runc"))
		with data.inventory as classes
	fx.fields(pool.deny) == {"spec.placeholderPod.runtimeClassName"} with input as fx.update_pool(fx.controller, named(fx.pool("node-a"), "placeholder"), named(fx.pool("node-a"), "gone"))
		with data.inventory as classes with data.config as fx.config
}

test_not_synced_denies_every_named_runtime_class if {
	msgs(runtimeclass.deny) == {`spec.placeholderPod.runtimeClassName: cannot check RuntimeClass "placeholder" yet: the webhook has not read the cluster's RuntimeClasses; retry`} with input as fx.create_class(named(fx.class, "placeholder"))
		with data.inventory as {"runtime_classes": {}, "runtime_classes_synced": false}
}

# Without a RuntimeClass inventory (sandboxpool vet, offline) nothing is checked.
test_no_inventory_checks_nothing if {
	count(runtimeclass.deny) == 0 with input as fx.create_class(named(fx.class, "probe-missing")) with data.inventory as {}
}
