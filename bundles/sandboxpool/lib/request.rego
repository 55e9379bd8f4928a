# METADATA
# description: |
#   The admission request under review (input.request, an admission.k8s.io/v1
#   AdmissionRequest) and the resources this bundle guards.
package sandboxpool.lib.request

# obj is the object after the request; old the object before it (UPDATE and DELETE only).
obj := input.request.object

old := input.request.oldObject

# user is the caller: username and groups.
user := input.request.userInfo

username := object.get(user, "username", "")

is_create if input.request.operation == "CREATE"

is_update if input.request.operation == "UPDATE"

# is_write is true for the operations that carry a new object to validate.
is_write if is_create

is_write if is_update

# kind is what the request is about: "class", "class_status", "pool" or "pool_status" (the
# status subresources), and undefined for anything else. The resources are one literal table: OPA
# evaluates each rule a request reads once per decision at a cost of several
# microseconds, and every request asks (docs/benchmarks.md, the policy layer).
kind := kinds[r.group][r.resource][object.get(input.request, "subResource", "")] if r := input.request.resource

# kinds maps group, resource and subresource ("" for the main resource) to a kind.
kinds := {"sandboxpool.agentcube.volcano.sh": {
	"sandboxpoolclasses": {"": "class", "status": "class_status"},
	"sandboxpools": {"": "pool", "status": "pool_status"},
}}

is_class if kind == "class"

is_pool if kind == "pool"

is_pool_status if kind == "pool_status"

# name is the name of the object under review.
name := n if {
	n := obj.metadata.name
	is_string(n)
	n != ""
} else := object.get(input.request, "name", "")
