package operator

import (
	"context"
	"errors"
	"fmt"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Snapshot is the part of a pool's spec the controller copies from its class: the same for
// every node of the class.
type Snapshot struct {
	ResourcePolicy v1alpha1.ResourcePolicy
	PlaceholderPod v1alpha1.PlaceholderPodTemplate
}

// errPriorityClassNotFound marks a class whose placeholderPod.priorityClassName names no
// PriorityClass: no pool can be given a consistent priority until it exists.
var errPriorityClassNotFound = errors.New("priority class not found")

// buildSnapshot resolves the class's priorityClassName to its numeric value and runs the
// resulting pool spec through the compiled CUE schema, so every default (and every rule)
// comes from schema/*.cue and none is restated here. The snapshot does not depend on the
// node, so it is defaulted once per class, for a representative node name.
func buildSnapshot(ctx context.Context, c client.Reader, s *schema.Schema, class *v1alpha1.SandboxPoolClass) (Snapshot, error) {
	tmpl := *class.Spec.PlaceholderPod.DeepCopy()
	if name := tmpl.PriorityClassName; name != "" {
		var pc schedulingv1.PriorityClass
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &pc); err != nil {
			if apierrors.IsNotFound(err) {
				return Snapshot{}, fmt.Errorf("spec.placeholderPod.priorityClassName: %w: %s", errPriorityClassNotFound, name)
			}
			return Snapshot{}, fmt.Errorf("getting priority class %s: %w", name, err)
		}
		// The resolved value wins over a number the class may also carry: the mirror pod
		// must carry the name and its value, consistent, or the Priority admission plugin
		// rejects it.
		v := pc.Value
		tmpl.Priority = &v
	}
	const node = "snapshot"
	pool := v1alpha1.SandboxPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPool},
		ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(node)},
		Spec: v1alpha1.SandboxPoolSpec{
			ClassRef: v1alpha1.ClassRef{Name: class.Name}, NodeName: node,
			ResourcePolicy: *class.Spec.ResourcePolicy.DeepCopy(), PlaceholderPod: tmpl,
		},
	}
	defaulted, err := schema.DefaultAs(s, schema.KindSandboxPool, &pool)
	if err != nil {
		return Snapshot{}, fmt.Errorf("defaulting the pool snapshot of class %s: %w", class.Name, err)
	}
	return Snapshot{ResourcePolicy: defaulted.Spec.ResourcePolicy, PlaceholderPod: defaulted.Spec.PlaceholderPod}, nil
}
