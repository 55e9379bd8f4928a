# METADATA
# description: Kubernetes object names and the deterministic pool name of a node.
package sandboxpool.lib.names

# max_subdomain_length is the longest DNS-1123 subdomain (an object name).
max_subdomain_length := 253

subdomain_pattern := `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`

# is_subdomain is true when s is a lower-case RFC 1123 subdomain.
is_subdomain(s) if {
	is_string(s)
	count(s) <= max_subdomain_length
	regex.match(subdomain_pattern, s)
}

pool_name_prefix := "placeholder-"

# Node names up to max_plain_node_name characters give placeholder-{nodeName}, at most 253.
max_plain_node_name := 241

# Longer node names keep their first truncated_node_name characters, then "-" and the
# first hash_length hex characters of SHA-256(nodeName): still 253 and deterministic.
truncated_node_name := 232

hash_length := 8

# pool_name is the only name the pool of node may have (SPEC §2).
pool_name(node) := concat("", [pool_name_prefix, node]) if {
	count(node) <= max_plain_node_name
} else := sprintf("%s%s-%s", [
	pool_name_prefix,
	substring(node, 0, truncated_node_name),
	substring(crypto.sha256(node), 0, hash_length),
])
