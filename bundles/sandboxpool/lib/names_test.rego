package sandboxpool.lib.names_test

import data.sandboxpool.lib.names

repeat(s, n) := concat("", [s | some _ in numbers.range(1, n)])

test_is_subdomain if {
	every s in ["a", "node-a", "ip-10-0-0-1.ec2.internal", "0", repeat("a", 253)] {
		names.is_subdomain(s)
	}
	every s in ["", "Node_A", "-a", "a-", "a..b", ".a", "a.", repeat("a", 254), 1, null] {
		not names.is_subdomain(s)
	}
}

test_pool_name_short if {
	names.pool_name("node-a") == "placeholder-node-a"
	names.pool_name(repeat("b", 241)) == concat("", ["placeholder-", repeat("b", 241)])
	count(names.pool_name(repeat("b", 241))) == 253
}

test_pool_name_long_is_hashed if {
	node := repeat("a", 250)
	name := names.pool_name(node)
	name == concat("", ["placeholder-", repeat("a", 232), "-3f3e35e0"])
	count(name) == 253
}

test_pool_name_boundary if {
	node := repeat("c", 242)
	want := concat("", ["placeholder-", repeat("c", 232), "-", substring(crypto.sha256(node), 0, 8)])
	names.pool_name(node) == want
}
