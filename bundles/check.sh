#!/usr/bin/env bash
# check.sh OPA: the policy gate of the admission bundle. Runs, with the given opa binary,
#   1. opa check --strict       (compile errors, unused variables and imports, ...)
#   2. opa fmt --diff --fail    (any formatting difference fails; fix with opa fmt -w)
#   3. opa test -b              (every *_test.rego, loaded as the bundle the webhook loads)
#   4. opa test --coverage      (fails when coverage is below COVERAGE_FLOOR, default 90)
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
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$opa" test --bundle --coverage --format=json "$dir" >"$report"
python3 - "$report" "$floor" <<'PY'
import json
import sys

path, floor = sys.argv[1], float(sys.argv[2])
with open(path) as f:
    report = json.load(f)
coverage = float(report["coverage"])
for name, file in sorted(report.get("files", {}).items()):
    if file.get("not_covered"):
        rows = ", ".join(
            f"{r['start']['row']}-{r['end']['row']}" for r in file["not_covered"]
        )
        print(f"  not covered: {name}: lines {rows}")
if coverage < floor:
    print(f"check.sh: Rego test coverage {coverage:.1f} % is below the floor of {floor:g} %", file=sys.stderr)
    sys.exit(1)
print(f"coverage {coverage:.1f} % (floor {floor:g} %)")
PY
