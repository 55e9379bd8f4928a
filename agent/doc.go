// Package agent is placeholder-agent, the node execution layer (docs/design.md §3.5): on each node it
// renders the static placeholder pod of the node's SandboxPool, keeps it there, drives
// node-ctl through staged resizes, renews the pool's Lease and reports status.
//
// Where things are: agent.go wires the manager and holds what the agent remembers; pass.go
// is one pass over a pool, which decides with lock.Plan (agent/lock, over the pieces observed by
// pieces.go) and writes manifests; status.go reports; resize.go keeps a resize's memory and
// events; lease.go renews the pools' Leases; nodectl.go polls, reloads, restarts and stops
// node-ctl; shim.go serves the placeholder shim; manifests.go watches the manifest directory;
// fleet.go runs many agents in one process.
package agent
