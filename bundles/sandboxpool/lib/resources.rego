# METADATA
# description: Rules of a ResourceList used as a per-node quota.
package sandboxpool.lib.resources

import data.sandboxpool.lib.quantity
import data.sandboxpool.lib.violation

# required are the resources every quota names, each greater than zero. Any other resource
# (hugepages-*, extended resources) may be listed with a quantity of zero or more.
required := {"cpu", "memory"}

# violations lists every rule that resources (found at the dotted path) breaks.
violations(resources, path) := (missing | not_positive) | negative if {
	is_object(resources)
	missing := {violation.new(sprintf("%s.%s", [path, name]), "field is required but not present") |
		some name in required
		not name in object.keys(resources)
	}
	not_positive := {violation.new(sprintf("%s.%s", [path, name]), "must be a quantity greater than zero") |
		some name in required
		q := resources[name]
		not quantity.positive(q)
	}
	negative := {violation.new(sprintf("%s.%s", [path, name]), "must be a quantity of zero or more") |
		some name, q in resources
		not name in required
		not quantity.non_negative(q)
	}
} else := {violation.new(path, "field is required but not present")} if {
	resources == null
} else := {violation.new(path, "must be a map of resource names to quantities")}
