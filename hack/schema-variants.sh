#!/usr/bin/env bash
# schema-variants.sh: what the CUE schema's alternatives and string checks cost when it
# validates and defaults a new object (docs/benchmarks-log.md, the policy layer). It runs
# schema's BenchmarkDefault on the schema as it is and on three variants that each drop
# more of what a cheaper schema would have to give up, and restores the schema after:
#   v1  no error("...") alternatives (the messages the corpus checks are lost)
#   v2  v1, and quantities as plain int | string (no pattern, no sign or range)
#   v3  v2, and no patterns or length limits on any string
# The variants are measurements, never a schema to ship: v1 already fails the corpus.
# Usage: hack/schema-variants.sh [benchtime] [count]
set -euo pipefail

benchtime=${1:-300x}
count=${2:-4}
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/schema
backup=$(mktemp -d)
cp "$dir"/*.cue "$backup"/
trap 'cp "$backup"/*.cue "$dir"/; rm -rf "$backup"' EXIT

variant() {
	local file
	for file in "$backup"/*.cue; do
		perl -0pe '
			s/\s*\|\s*error\("(?:[^"\\]|\\.)*"\)//g;
			if ($ENV{V} ge "v2") { s/^(#(?:NonNegative|Positive)?Quantity): .*$/$1: int | string/mg }
			if ($ENV{V} ge "v3") { s/\s*&\s*=~"(?:[^"\\]|\\.)*"//g; s/\s*&\s*strings\.MaxRunes\(\d+\)//g }
		' "$file" >"$dir/$(basename "$file")"
	done
}

for v in v0 v1 v2 v3; do
	if [[ $v == v0 ]]; then
		cp "$backup"/*.cue "$dir"/
	else
		V=$v variant
	fi
	echo "== schema $v"
	(cd "$dir/.." && go test -run '^$' -bench 'BenchmarkDefault$' -benchmem -benchtime "$benchtime" -count "$count" ./schema/)
done
