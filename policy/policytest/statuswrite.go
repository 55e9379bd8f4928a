package policytest

import (
	_ "embed"
	"strings"
	"testing"
)

// poolStatus is a SandboxPool as the API server stores it once both of its status writers
// have applied their fields: the controller's phase and two conditions, the agent's other
// fields and five conditions, and the managedFields that record who owns what (read back
// from a real kube-apiserver, names made up).
//
//go:embed testdata/pool-status.json
var poolStatus string

// StatusWriteNode is the node of the pool of StatusWrite.
const StatusWriteNode = "node-a"

// StatusWrite is the agent's most common write, as the API server hands it to admission:
// the stored pool of node StatusWriteNode (old) and the same pool with one node-ctl figure
// changed (status.poolInfo.allocatedMemoryBytes) and the agent's managedFields entry
// stamped with the write's time (obj). Both are JSON.
func StatusWrite(t testing.TB) (old, obj []byte) {
	t.Helper()
	o := poolStatus
	n := strings.Replace(o, `"allocatedMemoryBytes": 0`, `"allocatedMemoryBytes": 1073741824`, 1)
	n = strings.Replace(n, `"manager": "placeholder-agent",
        "operation": "Apply",
        "subresource": "status",
        "time": "2026-11-29T09:00:00Z"`, `"manager": "placeholder-agent",
        "operation": "Apply",
        "subresource": "status",
        "time": "2026-11-29T09:05:00Z"`, 1)
	if n == o || strings.Count(n, "09:05:00Z") != 1 {
		t.Fatal("policytest: testdata/pool-status.json no longer has the fields StatusWrite changes")
	}
	return []byte(o), []byte(n)
}
