#!/usr/bin/env bash
# make demo-down: stop the demo whose state file is DIR/state.json with the demo program,
# compiling nothing (stopping must not wait for a build).
#
#   hack/demo/down.sh DIR BIN
#
# BIN is the demo binary `make demo` built and ran. When it is gone (make clean while the
# demo runs), the demo's runner still is that program (`demo serve`), and its
# /proc/<pid>/exe opens it even after the file was removed: that is run instead, once the
# runner's pid and start time match the state file's. Only when neither exists does it
# stop, with a message saying how to get the binary back.
set -euo pipefail

dir=${1:?usage: down.sh DIR BIN} bin=${2:?usage: down.sh DIR BIN}
state=$dir/state.json

if [[ -x $bin ]]; then
	exec "$bin" down --dir="$dir"
fi
if [[ ! -f $state ]]; then
	echo "no demo running (no $state)"
	exit 0
fi

# The state file is indented JSON (tests/e2e/stack.WriteState) whose first record is the
# runner's, so the first "pid" and "startTime" are the runner's.
field() { sed -n "s/^ *\"$1\": *\([0-9]*\),*\$/\1/p" "$state" | head -n 1; }
pid=$(field pid) start=$(field startTime)
if [[ -n $pid && -r /proc/$pid/stat ]]; then
	stat=$(</proc/"$pid"/stat)
	read -ra fields <<<"${stat##*) }" # after the command name: field 3 onwards
	if [[ ${fields[19]} == "$start" ]]; then # field 22, the start time
		echo "$bin is missing; stopping the demo with its runner's own program (/proc/$pid/exe)"
		exec /proc/"$pid"/exe down --dir="$dir"
	fi
fi
echo "$bin is missing and the demo's runner (pid ${pid:-?}) is gone, so nothing here can read $state." >&2
echo "Build the demo binary (go build -trimpath -o $bin ./hack/demo, or make demo) and run make demo-down again." >&2
exit 1
