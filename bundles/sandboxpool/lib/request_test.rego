package sandboxpool.lib.request_test

import data.sandboxpool.lib.request

req(extra) := {"request": object.union(
	{
		"resource": {"group": "sandboxpool.agentcube.volcano.sh", "version": "v1alpha1", "resource": "sandboxpools"},
		"operation": "UPDATE",
		"name": "from-request",
		"userInfo": {"username": "u"},
	},
	extra,
)}

test_kinds if {
	request.is_pool with input as req({})
	not request.is_pool_status with input as req({})
	request.is_pool_status with input as req({"subResource": "status"})
	not request.is_pool with input as req({"subResource": "status"})
	not request.is_class with input as req({})
	request.is_class with input as req({"resource": {"resource": "sandboxpoolclasses"}})
}

test_operations if {
	request.is_write with input as req({})
	request.is_write with input as req({"operation": "CREATE"})
	not request.is_write with input as req({"operation": "DELETE"})
}

test_name if {
	request.name == "from-object" with input as req({"object": {"metadata": {"name": "from-object"}}})
	request.name == "from-request" with input as req({"object": {"metadata": {}}})
	request.name == "from-request" with input as req({})
}

test_username if {
	request.username == "u" with input as req({})
	request.username == "" with input as {"request": {"userInfo": {"groups": []}}}
}
