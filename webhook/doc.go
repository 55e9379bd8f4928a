// Package webhook is the SandboxPool validating admission webhook (docs/design.md §3.3).
//
// A request goes through one pipeline, Validator, shared by the HTTPS Handler and the
// offline `sandboxpool vet` command: the CUE schema (package schema) validates and
// defaults a created object, or validates what an update changed (ratcheting, as the API
// server does for CRDs), then the Rego policy (package policy) decides on the request.
// Inventory keeps the policy's view of the existing pools current from an informer. Run
// wires them into a process on a controller-runtime manager: its webhook server (TLS with
// certificate reload), health probes, metrics and cache.
package webhook
