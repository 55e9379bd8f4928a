package sandboxpool.lib.resources_test

import data.sandboxpool.lib.resources

test_valid if {
	count(resources.violations({"cpu": "1", "memory": "1Gi", "example.com/gpu": "0"}, "r")) == 0
}

test_every_rule_listed if {
	resources.violations({"cpu": "0", "nvidia.com/gpu": "-1"}, "r") == {
		{"field": "r.cpu", "msg": "r.cpu: must be a quantity greater than zero"},
		{"field": "r.memory", "msg": "r.memory: field is required but not present"},
		{"field": "r.nvidia.com/gpu", "msg": "r.nvidia.com/gpu: must be a quantity of zero or more"},
	}
}

test_missing_or_not_a_map if {
	resources.violations(null, "r") == {{"field": "r", "msg": "r: field is required but not present"}}
	resources.violations("4", "r") == {{"field": "r", "msg": "r: must be a map of resource names to quantities"}}
}
