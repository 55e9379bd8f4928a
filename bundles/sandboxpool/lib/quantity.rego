# METADATA
# description: Kubernetes resource quantities (resource.Quantity) read as numbers.
package sandboxpool.lib.quantity

# pattern is the Kubernetes quantity syntax: an optionally signed decimal number, then a
# binary-SI suffix (Ki..Ei), a decimal-SI suffix (n u m k M G T P E) or an exponent (e3).
# units.parse alone is more lenient (it takes "4gi" and "4g"), so it only sees strings that
# passed this pattern.
pattern := `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$`

# value is the quantity q as a number, undefined when q is not a quantity. A JSON integer
# is a quantity (the schema is int-or-string); a fractional JSON number is not: "500m".
value(q) := q if {
	is_number(q)
	q == floor(q)
}

value(q) := parse(q) if {
	is_string(q)
	regex.match(pattern, q)
}

# parse reads a string that matches pattern; units.parse knows no nano or micro suffix.
parse(s) := units.parse(trim_suffix(s, "n")) / 1000000000 if {
	endswith(s, "n")
} else := units.parse(trim_suffix(s, "u")) / 1000000 if {
	endswith(s, "u")
} else := units.parse(s)

# positive is true when q is a quantity greater than zero.
positive(q) if value(q) > 0

# non_negative is true when q is a quantity of zero or more.
non_negative(q) if value(q) >= 0
