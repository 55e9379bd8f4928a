// Package v1alpha1 holds the Go types of the SandboxPool API and the names every component
// shares (labels, annotations, condition types, field managers).
//
// The CUE files in schema/ are the source of truth. These types are written by hand to
// match them, and their field docs are generated from the CUE docs (make generate, the
// same text as the CRD's descriptions). Tests in this package prove that every example and
// golden object round-trips through the CUE schema and these types unchanged, and that the
// types have exactly the fields of the generated CRD schema; schema/crdgen's tests that
// each field's doc is its CRD description.
//
// +k8s:deepcopy-gen=package
// +groupName=sandboxpool.agentcube.volcano.sh
package v1alpha1
