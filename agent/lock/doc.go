// Package lock decides a pool's lock: the placeholder pods (pieces) kubelet and the scheduler
// count for the pool and what node-ctl may enforce beside them. Plan is a pure function of
// what the agent observes (Input) and returns the next Step; the agent executes it. Room is
// the node's free room as the scheduler counts it, and resources.go holds the resource-list
// arithmetic the decision uses.
package lock
