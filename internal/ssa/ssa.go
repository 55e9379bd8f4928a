// Package ssa is how the controller and the placeholder-agent write what they own of an
// object: server-side apply of a typed value with the writer's field manager, never forced
// (docs/design.md §4), and one rule for whether a write is due.
package ssa

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Status is the status of a kind of the SandboxPool API.
type Status interface {
	v1alpha1.SandboxPoolStatus | v1alpha1.SandboxPoolClassStatus
}

// ApplyStatus server-side applies status as everything owner owns of obj's status: a field
// owner applied before and left out of status is removed. A field another manager owns is
// a conflict, returned for the caller to retry on its next pass; the apply never forces.
// On success obj holds the object the API server returned.
func ApplyStatus[S Status](ctx context.Context, c client.Client, obj client.Object, status *S, owner string) error {
	patch, err := applyPatch(c, obj, nil, status)
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, obj, patch, client.FieldOwner(owner)); err != nil {
		return fmt.Errorf("applying the status of %s as %s: %w", obj.GetName(), owner, err)
	}
	return nil
}

// ApplyAnnotations server-side applies annotations as everything owner owns of obj's
// metadata.annotations, never forced. On success obj holds the object the API server
// returned.
func ApplyAnnotations(ctx context.Context, c client.Client, obj client.Object, annotations map[string]string, owner string) error {
	patch, err := applyPatch(c, obj, annotations, nil)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, patch, client.FieldOwner(owner)); err != nil {
		return fmt.Errorf("applying the annotations of %s as %s: %w", obj.GetName(), owner, err)
	}
	return nil
}

// applyPatch is the apply configuration of obj (its kind and name) with annotations and
// status, each left out when nil.
func applyPatch(c client.Client, obj client.Object, annotations map[string]string, status any) (client.Patch, error) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("the kind of %s: %w", obj.GetName(), err)
	}
	type metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	b, err := json.Marshal(struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   metadata `json:"metadata"`
		Status     any      `json:"status,omitempty"`
	}{gvk.GroupVersion().String(), gvk.Kind, metadata{obj.GetName(), obj.GetNamespace(), annotations}, status})
	if err != nil {
		return nil, fmt.Errorf("encoding the apply of %s: %w", obj.GetName(), err)
	}
	return client.RawPatch(types.ApplyPatchType, b), nil
}

// StatusChanged reports whether applying want would change have (nil: nothing applied yet),
// both as the JSON an apply sends. Left out of the comparison: each condition's
// lastTransitionTime (meta.SetStatusCondition keeps it while the condition's status stays,
// so it follows from the rest), the order of the conditions, and the fields at the dotted
// paths of ignore (heartbeats and probe times, which are refreshed when something else is
// written and never cause a write).
func StatusChanged[S Status](have, want *S, ignore ...string) bool {
	h, err := normalized(have, ignore)
	if err != nil {
		return true
	}
	w, err := normalized(want, ignore)
	if err != nil {
		return true
	}
	return !reflect.DeepEqual(h, w)
}

// normalized is status as JSON decoded into a map, without what StatusChanged leaves out.
func normalized(status any, ignore []string) (map[string]any, error) {
	b, err := json.Marshal(status)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, path := range ignore {
		unstructured.RemoveNestedField(m, strings.Split(path, ".")...)
	}
	conds, _ := m["conditions"].([]any)
	for _, c := range conds {
		if c, ok := c.(map[string]any); ok {
			delete(c, "lastTransitionTime")
		}
	}
	slices.SortStableFunc(conds, func(a, b any) int { return cmp.Compare(conditionType(a), conditionType(b)) })
	return m, nil
}

func conditionType(c any) string {
	m, _ := c.(map[string]any)
	t, _ := m["type"].(string)
	return t
}
