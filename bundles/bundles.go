// Package bundles is the OPA bundle of the SandboxPool admission policy, embedded.
//
// The directory is both an OPA bundle (.manifest with roots ["sandboxpool"] and
// rego_version 1, policies under sandboxpool/, each *_test.rego beside its policy) and a Go
// package, so the webhook ships the policy in its binary and `opa test bundles` tests the
// same files. See README.md for the rules and the input and data contract.
package bundles

import (
	"embed"
	"io/fs"
)

// Root is the bundle root (the manifest's only root) and the top-level package of every
// policy in it.
const Root = "sandboxpool"

// files holds the manifest and every file under sandboxpool/. The all: prefix keeps files
// whose names start with "." or "_" (go:embed drops those silently otherwise, e.g. a nested
// .manifest).
//
//go:embed all:sandboxpool .manifest
var files embed.FS

// FS returns the bundle as a file system: .manifest at the top, the policies and their
// tests under sandboxpool/.
func FS() fs.FS { return files }
