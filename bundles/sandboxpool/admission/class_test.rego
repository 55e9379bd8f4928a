package sandboxpool.admission.class_test

import data.sandboxpool.admission.class
import data.sandboxpool.admission.fixtures_test as fx

with_resources(r) := json.patch(fx.class, [{"op": "replace", "path": "/spec/resourcePolicy/resources", "value": r}])

test_valid_class_allowed if {
	count(class.deny) == 0 with input as fx.create_class(fx.class)
}

test_quantity_syntaxes_allowed if {
	every r in [
		{"cpu": "500m", "memory": "4Gi"},
		{"cpu": 2, "memory": "1e9"},
		{"cpu": "+1.5", "memory": "512M", "hugepages-2Mi": "0", "example.com/gpu": "1"},
		{"cpu": "250000u", "memory": "2Ti"},
		{"cpu": "1000000000n", "memory": "1k"},
	] {
		count(class.deny) == 0 with input as fx.create_class(with_resources(r))
	}
}

test_missing_memory_denied if {
	class.deny == {{
		"field": "spec.resourcePolicy.resources.memory",
		"msg": "spec.resourcePolicy.resources.memory: field is required but not present",
	}} with input as fx.create_class(with_resources({"cpu": "4"}))
}

test_cpu_not_positive_denied if {
	every cpu in ["0", "-1", "0m", 0, -2, 0.5, "4 cores", "4gi", "", true] {
		class.deny == {{
			"field": "spec.resourcePolicy.resources.cpu",
			"msg": "spec.resourcePolicy.resources.cpu: must be a quantity greater than zero",
		}} with input as fx.create_class(with_resources({"cpu": cpu, "memory": "8Gi"}))
	}
}

test_memory_malformed_denied if {
	fx.fields(class.deny) == {"spec.resourcePolicy.resources.memory"} with input as fx.create_class(with_resources({"cpu": "4", "memory": "8 gigs"}))
}

test_other_resource_negative_denied if {
	class.deny == {{
		"field": "spec.resourcePolicy.resources.hugepages-2Mi",
		"msg": "spec.resourcePolicy.resources.hugepages-2Mi: must be a quantity of zero or more",
	}} with input as fx.create_class(with_resources({"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "-2Mi"}))
}

test_resources_missing_denied if {
	obj := json.remove(fx.class, ["spec/resourcePolicy/resources"])
	class.deny == {{
		"field": "spec.resourcePolicy.resources",
		"msg": "spec.resourcePolicy.resources: field is required but not present",
	}} with input as fx.create_class(obj)
}

test_resources_not_a_map_denied if {
	fx.fields(class.deny) == {"spec.resourcePolicy.resources"} with input as fx.create_class(with_resources(["cpu"]))
}

test_every_violation_listed if {
	obj := with_runtime_class(with_resources({"cpu": "0"}), "Not_Valid")
	fx.fields(class.deny) == {
		"spec.resourcePolicy.resources.cpu",
		"spec.resourcePolicy.resources.memory",
		"spec.placeholderPod.runtimeClassName",
	} with input as fx.create_class(obj)
}

with_runtime_class(obj, rc) := json.patch(obj, [{"op": "replace", "path": "/spec/placeholderPod/runtimeClassName", "value": rc}])

test_runtime_class_valid_allowed if {
	every rc in ["placeholder", "kata.v2", "a"] {
		count(class.deny) == 0 with input as fx.create_class(with_runtime_class(fx.class, rc))
	}
}

test_runtime_class_unset_allowed if {
	obj := json.remove(fx.class, ["spec/placeholderPod"])
	count(class.deny) == 0 with input as fx.create_class(obj)
}

test_runtime_class_invalid_denied if {
	every rc in ["Not_Valid", "", "-a", "a..b", concat("", ["a" | some _ in numbers.range(1, 254)]), 7] {
		class.deny == {{
			"field": "spec.placeholderPod.runtimeClassName",
			"msg": "spec.placeholderPod.runtimeClassName: must be a lower-case RFC 1123 subdomain",
		}} with input as fx.create_class(with_runtime_class(fx.class, rc))
	}
}

test_selector_change_denied if {
	obj := json.patch(fx.class, [{"op": "replace", "path": "/spec/selector", "value": {"matchLabels": {"pool": "other"}}}])
	class.deny == {{
		"field": "spec.selector",
		"msg": "spec.selector: field is immutable; to change the node set relabel the nodes or recreate the class",
	}} with input as fx.update_class(fx.class, obj)
}

test_update_without_selector_change_allowed if {
	obj := with_resources({"cpu": "8", "memory": "16Gi"})
	count(class.deny) == 0 with input as fx.update_class(fx.class, obj)
}

test_update_ratchets_existing_violations if {
	old := with_resources({"cpu": "0", "memory": "8Gi"})
	obj := json.patch(old, [{"op": "add", "path": "/metadata/finalizers", "value": []}])
	count(class.deny) == 0 with input as fx.update_class(old, obj)
}

test_update_introducing_violation_denied if {
	obj := with_resources({"cpu": "0", "memory": "8Gi"})
	fx.fields(class.deny) == {"spec.resourcePolicy.resources.cpu"} with input as fx.update_class(fx.class, obj)
}

test_class_status_and_delete_not_checked if {
	bad := with_resources({"cpu": "0"})
	status := fx.request("sandboxpoolclasses", "status", "UPDATE", fx.controller, bad, bad)
	count(class.deny) == 0 with input as status
	count(class.deny) == 0 with input as fx.request("sandboxpoolclasses", "", "DELETE", fx.admin, null, bad)
}
