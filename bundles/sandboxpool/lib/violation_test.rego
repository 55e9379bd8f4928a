package sandboxpool.lib.violation_test

import data.sandboxpool.lib.violation

test_new_prefixes_field if {
	violation.new("spec.nodeName", "field is immutable") == {"field": "spec.nodeName", "msg": "spec.nodeName: field is immutable"}
}
