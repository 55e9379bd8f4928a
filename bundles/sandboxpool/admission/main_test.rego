package sandboxpool.admission_test

import data.sandboxpool.admission
import data.sandboxpool.admission.fixtures_test as fx

test_valid_requests_allowed if {
	count(admission.deny) == 0 with input as fx.create_class(fx.class) with data.config as fx.config
	count(admission.deny) == 0 with input as fx.create_pool(fx.pool("node-a")) with data.config as fx.config
	count(admission.deny) == 0 with input as fx.update_status(fx.kubelet("node-b"), fx.pool_with_status, fx.pool_with_status)
		with data.config as fx.config
}

test_class_violations_reported if {
	bad := json.patch(fx.class, [{"op": "replace", "path": "/spec/resourcePolicy/resources/cpu", "value": "64"}])
	fx.fields(admission.deny) == {"spec"} with input as fx.request("sandboxpoolclasses", "", "UPDATE", fx.controller, bad, fx.class)
		with data.config as fx.config
}

test_pool_violations_reported if {
	bad := json.patch(fx.pool("node-a"), [{"op": "replace", "path": "/spec/resourcePolicy/resources/cpu", "value": "64"}])
	fx.fields(admission.deny) == {"spec"} with input as fx.update_pool(fx.kubelet("node-a"), fx.pool("node-a"), bad)
		with data.config as fx.config
}

test_status_violations_reported if {
	fx.fields(admission.deny) == {"status"} with input as fx.update_status(fx.kubelet("node-a"), fx.pool_with_status, fx.pool_with_status)
		with data.config as fx.config
}

test_other_requests_allowed if {
	bad := json.patch(fx.pool("node-a"), [{"op": "replace", "path": "/metadata/name", "value": "x"}])
	count(admission.deny) == 0 with input as fx.request("sandboxpools", "", "DELETE", fx.admin, null, bad)
	count(admission.deny) == 0 with input as fx.request("sandboxpools", "", "CONNECT", fx.admin, bad, null)
	other := json.patch(fx.request("sandboxpools", "", "CREATE", fx.admin, bad, null), [{"op": "replace", "path": "/request/resource/group", "value": "example.com"}])
	count(admission.deny) == 0 with input as other
}
