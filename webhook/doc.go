// Package webhook is the SandboxPool validating admission webhook (docs/design.md §3.3).
//
// A request is decided by Validator, shared by the HTTPS Handler and the offline
// `sandboxpool vet` command: the Rego policy (package policy) on the request, as the API
// server sends it. The object's shape is not checked here: the API server has checked it
// against the CRD generated from the CUE schema before it calls the webhook. Inventory keeps
// the policy's view of the existing pools current from an informer. Run wires them into a
// process on a controller-runtime manager: its webhook server (TLS with certificate
// reload), health probes, metrics and cache.
package webhook
