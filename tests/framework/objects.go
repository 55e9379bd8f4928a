package framework

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// PoolStatus is a server-side apply configuration of a pool's status: exactly the fields a
// writer (agent or controller) claims.
func PoolStatus(name string, status map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.KindSandboxPool,
		"metadata":   map[string]any{"name": name},
		"status":     status,
	}}
}

// Condition is a status condition as JSON, with reason and message set to reason and a
// fixed transition time.
func Condition(typ, status, reason string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": reason,
		"lastTransitionTime": "2026-11-29T10:00:00Z"}
}
