// Package naming derives the deterministic names of the objects the controller and the
// agents create. The name of a node's pool is what makes "one pool per node" atomic: a second
// create of the same name fails with AlreadyExists (docs/design.md §2).
//
// The rule itself lives in the CUE schema (#PoolName in schema/sandboxpool.cue); this
// package restates it in Go for the hot path, and its tests prove the two agree. The
// admission policy restates the hashed form, which the CRD's CEL cannot compute
// (bundles/sandboxpool/admission/pool.rego; policy's tests compare it with PoolName).
package naming

import (
	"crypto/sha256"
	"encoding/hex"
)

const (
	// PoolNamePrefix starts the name of every SandboxPool.
	PoolNamePrefix = "placeholder-"

	// MaxUnhashedNodeNameLength is the longest node name used verbatim in a pool name:
	// len(PoolNamePrefix) + 241 = 253, the longest DNS subdomain.
	MaxUnhashedNodeNameLength = 241

	// hashedNodeNamePrefixLength is how much of a longer node name is kept before the hash.
	hashedNodeNamePrefixLength = 232
	// hashSuffixLength is how many hex characters of SHA-256(nodeName) end a hashed name.
	hashSuffixLength = 8
)

// PoolName returns the name of the SandboxPool of the node nodeName: "placeholder-" +
// nodeName, or, when nodeName is longer than 241 characters, "placeholder-" + its first 232
// characters + "-" + the first 8 hex characters of SHA-256(nodeName). The result is at most
// 253 characters and depends on nodeName only.
//
// Node names are DNS subdomains (ASCII), so characters and bytes are the same here.
func PoolName(nodeName string) string {
	if len(nodeName) <= MaxUnhashedNodeNameLength {
		return PoolNamePrefix + nodeName
	}
	sum := sha256.Sum256([]byte(nodeName))
	return PoolNamePrefix + nodeName[:hashedNodeNamePrefixLength] + "-" +
		hex.EncodeToString(sum[:])[:hashSuffixLength]
}

// maxLabelValueLength is the longest label value Kubernetes accepts.
const maxLabelValueLength = 63

// LabelValue is an object name (a node or pool name, a DNS subdomain) as a label value, for
// the sandbox-pool.io/node and sandbox-pool.io/pool-name labels. Label values are at most 63
// characters and names up to 253, so a longer name becomes its first 54 characters, "-" and
// the first 8 hex characters of its SHA-256: still deterministic, and still starting and
// ending with an alphanumeric character. Exact lookups use the full name (spec.nodeName, the
// sandbox-pool.io/pool-name annotation); the label is for selectors and people.
func LabelValue(name string) string {
	if len(name) <= maxLabelValueLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxLabelValueLength-1-hashSuffixLength] + "-" + hex.EncodeToString(sum[:])[:hashSuffixLength]
}
