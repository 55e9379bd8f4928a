# METADATA
# description: |
#   The admission request under review (input.request, an admission.k8s.io/v1
#   AdmissionRequest) and the resources this bundle guards.
package sandboxpool.lib.request

group := "sandboxpool.agentcube.volcano.sh"

classes := "sandboxpoolclasses"

pools := "sandboxpools"

status_subresource := "status"

# obj is the object after the request; old the object before it (UPDATE and DELETE only).
obj := input.request.object

old := input.request.oldObject

# user is the caller: username and groups.
user := input.request.userInfo

username := object.get(user, "username", "")

subresource := object.get(input.request, "subResource", "")

is_create if input.request.operation == "CREATE"

is_update if input.request.operation == "UPDATE"

# is_write is true for the operations that carry a new object to validate.
is_write if is_create

is_write if is_update

is_class if {
	input.request.resource.group == group
	input.request.resource.resource == classes
	subresource == ""
}

is_pool if {
	input.request.resource.group == group
	input.request.resource.resource == pools
	subresource == ""
}

is_pool_status if {
	input.request.resource.group == group
	input.request.resource.resource == pools
	subresource == status_subresource
}

# name is the name of the object under review.
name := n if {
	n := obj.metadata.name
	is_string(n)
	n != ""
} else := object.get(input.request, "name", "")
