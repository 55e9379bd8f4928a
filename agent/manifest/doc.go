// Package manifest renders, writes, reads and watches the static pod manifests of a
// SandboxPool's placeholder pods (docs/design.md §3.5).
//
// The node's placeholder-agent holds a pool's lock with one or more placeholder pods, its
// pieces: one file per piece, sandbox-pool-{pool}_{n}.yaml with the pod sandbox-pool-{n}, in
// kubelet's manifest directory (--manifest-dir, by default /etc/kubernetes/manifests).
// kubelet runs each pod and creates its mirror pod in the API server; the pods' requests lock
// the pool's resources in kubelet and in the scheduler's view of the node.
//
// The package is the whole life of those files and nothing else:
//
//   - Render turns a Spec into the manifest bytes, deterministically, with a
//     sandbox-pool.io/manifest-hash annotation over its own content and a metadata.uid
//     derived from it, which kubelet keeps as the static pod's UID.
//   - Write replaces a file atomically; Ensure writes it only when it is missing or differs
//     from what it should be; Remove deletes pieces, RemovePool all of a pool's; Replace
//     removes pieces and writes their replacement in one instant.
//   - Read, Parse, List and Pieces read manifests back; File.Verify tells a file Render
//     produced from one that was edited since.
//   - CleanupOrphans is the startup orphan test: a manifest whose pool is gone, or whose
//     pool was recreated under a new UID, is deleted; every other case keeps the file.
//   - Watch reports changes to the files, and calls back periodically so a missed event is
//     still caught.
//
// # Files kubelet must not read
//
// kubelet reads every file of the manifest directory whose name does not start with a dot.
// The temporary files of Write are therefore hidden ("." + file name + ".tmp-" + random);
// they never match the sandbox-pool-*.yaml pattern either, so List and Watch skip them.
//
// # Long pool names
//
// Pool names may be 253 characters long, file names only 255 bytes. A pool name longer
// than MaxFileKeyLength characters is shortened in its file name (see FileKey); the full
// name is always in the sandbox-pool.io/pool-name annotation, which is what Read returns.
package manifest
