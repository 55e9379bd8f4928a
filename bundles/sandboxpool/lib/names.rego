# METADATA
# description: |
#   Names the policy shares with the Go code (package schema/v1alpha1, where they are
#   declared). policy's TestRegoNamesMatchGo fails when the two differ.
package sandboxpool.lib.names

# controller_conditions are the condition types of a pool's status that the controller
# owns (v1alpha1.ControllerConditions); every other condition type belongs to the agent.
controller_conditions := {"PlaceholderAgentHealthy", "NodeNotFound"}

# controller_status_fields are the status fields the controller owns besides its
# conditions; every other status field belongs to the node's placeholder agent.
controller_status_fields := {"phase"}

# ever_ready is the controller's marker on a pool that has been Ready once
# (v1alpha1.AnnotationEverReady): it makes a pool that stops serving Unready, not Pending.
ever_ready := "sandbox-pool.io/ever-ready"

# class_label and node_label are the labels the controller keeps on every pool
# (v1alpha1.LabelClass, v1alpha1.LabelNode).
class_label := "sandbox-pool.io/class"

node_label := "sandbox-pool.io/node"

# controller_field_manager and agent_field_manager are the server-side apply field managers
# of the two status writers (v1alpha1.FieldManagerController, v1alpha1.FieldManagerAgent).
controller_field_manager := "sandboxpool-controller"

agent_field_manager := "placeholder-agent"

# runtime_handler is the CRI runtime handler of the placeholder shim
# (v1alpha1.PlaceholderRuntimeHandler): the RuntimeClass a class or pool names must run it.
runtime_handler := "placeholder"

# The deterministic pool name of a node (naming.PoolName): pool_name_prefix and the node
# name, or, for a node name longer than max_unhashed_node_name characters, the prefix, its
# first hashed_node_name_prefix characters, "-" and the first hash_suffix hex characters of
# its SHA-256.
pool_name_prefix := "placeholder-"

max_unhashed_node_name := 241

hashed_node_name_prefix := 232

hash_suffix := 8
