package sandboxpool.admission.class_test

import data.sandboxpool.admission.class
import data.sandboxpool.admission.fixtures_test as fx

with_resources(r) := json.patch(fx.class, [{"op": "replace", "path": "/spec/resourcePolicy/resources", "value": r}])

test_valid_class_allowed if {
	count(class.deny) == 0 with input as fx.create_class(fx.class)
}

# The shape of a class is the schema's: the policy does not restate it.
test_shape_left_to_the_schema if {
	count(class.deny) == 0 with input as fx.create_class(with_resources({"cpu": "0"}))
}

# The selector's immutability is the CRD's (a CEL rule generated from @crd(immutable)): the
# API server refuses the change before it calls the webhook.
test_selector_change_left_to_the_crd if {
	obj := json.patch(fx.class, [{"op": "replace", "path": "/spec/selector", "value": {"matchLabels": {"pool": "other"}}}])
	count(class.deny) == 0 with input as fx.update_class(fx.class, obj)
}

test_update_without_selector_change_allowed if {
	obj := with_resources({"cpu": "8", "memory": "16Gi"})
	count(class.deny) == 0 with input as fx.update_class(fx.class, obj)
}

test_controller_writes_finalizers_only if {
	finalized := json.patch(fx.class, [{"op": "add", "path": "/metadata/finalizers", "value": ["sandboxpool.agentcube.volcano.sh/pools"]}])
	count(class.deny) == 0 with input as fx.request("sandboxpoolclasses", "", "UPDATE", fx.controller, finalized, fx.class)
		with data.config as fx.config
	resized := json.patch(finalized, [{"op": "replace", "path": "/spec/resourcePolicy/resources/cpu", "value": "64"}])
	class.deny == {{
		"field": "spec",
		"msg": "spec: declared by cluster admins; the controller (caller system:serviceaccount:sandbox-pool-system:sandboxpool-controller) may change a class's finalizers and status only",
	}} with input as fx.request("sandboxpoolclasses", "", "UPDATE", fx.controller, resized, fx.class)
		with data.config as fx.config
}

test_class_status_and_delete_not_checked if {
	other := json.patch(fx.class, [{"op": "replace", "path": "/spec/selector", "value": {}}])
	status := fx.request("sandboxpoolclasses", "status", "UPDATE", fx.controller, other, fx.class)
	count(class.deny) == 0 with input as status with data.config as fx.config
	count(class.deny) == 0 with input as fx.request("sandboxpoolclasses", "", "DELETE", fx.admin, null, fx.class)
}
