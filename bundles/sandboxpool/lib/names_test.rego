package sandboxpool.lib.names_test

import data.sandboxpool.lib.names

test_names if {
	names.controller_conditions == {"PlaceholderAgentHealthy", "NodeNotFound"}
	names.controller_status_fields == {"phase"}
	startswith(names.ever_ready, "sandbox-pool.io/")
	{names.class_label, names.node_label} == {"sandbox-pool.io/class", "sandbox-pool.io/node"}
}
