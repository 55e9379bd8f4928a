#!/usr/bin/env bash
# Prints the replace block hack/kube/go.mod needs: every k8s.io staging module that
# k8s.io/kubernetes requires at v0.0.0, pinned to the matching v0.x release.
set -euo pipefail
k8s=${1:-v1.37.2}
staging=v0.${k8s#v1.}
mod=$(cd / && GO111MODULE=on go mod download -json "k8s.io/kubernetes@${k8s}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
echo "replace ("
grep -E '^\s*k8s.io/[a-z0-9-]+ v0\.0\.0\s*$' "$mod" | awk -v v="$staging" '{print "\t"$1" => "$1" "v}' | sort -u
echo ")"
