# METADATA
# description: Requests, objects and callers shared by the admission tests.
package sandboxpool.admission.fixtures_test

config := {
	"controller_usernames": ["system:serviceaccount:sandbox-pool-system:sandboxpool-controller"],
	"controller_groups": ["sandbox-pool:controllers"],
	"operator_usernames": [],
	"operator_groups": ["sandbox-pool:operators"],
}

admin := {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}

controller := {"username": "system:serviceaccount:sandbox-pool-system:sandboxpool-controller", "groups": ["system:serviceaccounts"]}

controller_by_group := {"username": "sandboxpool-controller-2", "groups": ["sandbox-pool:controllers"]}

kubelet(node) := {"username": concat("", ["system:node:", node]), "groups": ["system:nodes", "system:authenticated"]}

# lease_sa is a node's Lease identity: it renews the pool's Lease and writes nothing else.
lease_sa(node) := {
	"username": concat("", ["system:serviceaccount:sandbox-pool-node-lease:placeholder-agent-", node]),
	"groups": ["system:serviceaccounts", "system:serviceaccounts:sandbox-pool-node-lease"],
}

operator := {"username": "olivia", "groups": ["sandbox-pool:operators", "system:authenticated"]}

resources := {"cpu": "4", "memory": "8Gi"}

class := {
	"apiVersion": "sandboxpool.agentcube.volcano.sh/v1alpha1",
	"kind": "SandboxPoolClass",
	"metadata": {"name": "default"},
	"spec": {
		"selector": {"matchLabels": {"sandbox.agentcube.io/pool": "default"}},
		"resourcePolicy": {"resources": resources},
		"placeholderPod": {"runtimeClassName": "placeholder"},
	},
}

pool(node) := {
	"apiVersion": "sandboxpool.agentcube.volcano.sh/v1alpha1",
	"kind": "SandboxPool",
	"metadata": {"name": concat("", ["placeholder-", node])},
	"spec": {
		"classRef": {"name": "default"},
		"nodeName": node,
		"resourcePolicy": {"resources": resources},
	},
}

condition(t, s) := {
	"type": t,
	"status": s,
	"lastTransitionTime": "2026-11-29T10:00:00Z",
	"reason": "Test",
	"message": "",
}

# pool_with_status is the pool of node-b with a full status written by both owners.
pool_with_status := object.union(pool("node-b"), {"status": {
	"phase": "Ready",
	"placeholderPod": {"name": "placeholder-node-b-node-b", "uid": "u1", "phase": "Running"},
	"placeholderAgent": {"version": "v0.1.0"},
	"nodeCtl": {"connected": true},
	"poolInfo": {"zone": "z1", "allocatableMemoryBytes": 8589934592, "allocatedMemoryBytes": 0},
	"lastAppliedGeneration": 1,
	"conditions": [
		condition("PlaceholderPodReady", "True"),
		condition("NodeCtlHealthy", "True"),
		condition("PlaceholderAgentHealthy", "True"),
	],
}})

request(resource, subresource, operation, user, obj, old) := {"request": object.union(
	{
		"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
		"kind": {"group": "sandboxpool.agentcube.volcano.sh", "version": "v1alpha1", "kind": kind_of(resource)},
		"resource": {"group": "sandboxpool.agentcube.volcano.sh", "version": "v1alpha1", "resource": resource},
		"name": name_of(obj, old),
		"operation": operation,
		"userInfo": user,
		"object": obj,
		"oldObject": old,
	},
	sub(subresource),
)}

name_of(obj, old) := n if {
	n := obj.metadata.name
} else := old.metadata.name

sub("") := {}

sub(s) := {"subResource": s} if s != ""

kind_of("sandboxpoolclasses") := "SandboxPoolClass"

kind_of("sandboxpools") := "SandboxPool"

create_class(obj) := request("sandboxpoolclasses", "", "CREATE", admin, obj, null)

update_class(old, obj) := request("sandboxpoolclasses", "", "UPDATE", admin, obj, old)

create_pool(obj) := request("sandboxpools", "", "CREATE", controller, obj, null)

update_pool(user, old, obj) := request("sandboxpools", "", "UPDATE", user, obj, old)

update_status(user, old, obj) := request("sandboxpools", "status", "UPDATE", user, obj, old)

# fields returns the fields of a set of violations.
fields(violations) := {v.field | some v in violations}
