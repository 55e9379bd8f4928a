#!/usr/bin/env bash
# check.sh OPA: the policy gate of the admission bundle. Runs, with the given opa binary,
#   1. opa check --strict       (compile errors, unused variables and imports, ...)
#   2. opa fmt --diff --fail    (any formatting difference fails; fix with opa fmt -w)
#   3. opa test -b              (every *_test.rego, loaded as the bundle the webhook loads)
#   4. opa test --coverage      (fails when coverage is below COVERAGE_FLOOR, default 90;
#                                hack/opacoverage reads the report)
# Usage: bundles/check.sh /path/to/opa
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 /path/to/opa" >&2
	exit 2
fi
opa=$1
floor=${COVERAGE_FLOOR:-90}
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ ! -x $opa ]]; then
	echo "check.sh: opa binary not found or not executable: $opa" >&2
	exit 2
fi

echo "==> opa check --strict"
"$opa" check --strict --bundle "$dir"

echo "==> opa fmt --diff"
if ! diff_out=$("$opa" fmt --diff --fail "$dir"); then
	printf '%s\n' "$diff_out"
	echo "check.sh: Rego files are not formatted; run: $opa fmt -w $dir" >&2
	exit 1
fi

echo "==> opa test"
"$opa" test --bundle "$dir"

echo "==> opa test --coverage (floor ${floor} %)"
"$opa" test --bundle --coverage --format=json "$dir" | (cd "$dir/.." && go run ./hack/opacoverage -floor "$floor")
