package operator

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// ensureFinalizer adds the class finalizer, which keeps a deleted class until its pools are
// gone.
func (r *ClassReconciler) ensureFinalizer(ctx context.Context, class *v1alpha1.SandboxPoolClass) error {
	if controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerClassPools) {
		return nil
	}
	orig := class.DeepCopy()
	controllerutil.AddFinalizer(class, v1alpha1.FinalizerClassPools)
	if err := r.Client.Patch(ctx, class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(v1alpha1.FieldManagerController)); err != nil {
		return fmt.Errorf("adding the finalizer to class %s: %w", class.Name, err)
	}
	return nil
}

// finalizeClass deletes every pool of a deleted class (the cascade does not wait for a
// garbage collector) and releases the class once none is left. Each pool goes when its own
// finalizer is released (its mirror pod gone, or the finalizer timeout).
func (r *ClassReconciler) finalizeClass(ctx context.Context, class *v1alpha1.SandboxPoolClass, ours []*v1alpha1.SandboxPool) error {
	var errs []error
	deleting := 0
	for _, pool := range ours {
		if pool.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, pool, client.Preconditions{UID: &pool.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting pool %s: %w", pool.Name, err))
			continue
		}
		deleting++
	}
	if deleting > 0 {
		logf.FromContext(ctx).Info("class deleted: deleting its pools", "count", deleting)
		r.Recorder.Eventf(class, nil, corev1.EventTypeNormal, EventReasonSuccessfulDelete, ActionDeletePool,
			"Class deleted: deleting its %d pools", deleting)
	}
	if len(errs) > 0 || len(ours) > 0 || !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerClassPools) {
		return errors.Join(errs...) // pool deletions bring the class back
	}
	orig := class.DeepCopy()
	controllerutil.RemoveFinalizer(class, v1alpha1.FinalizerClassPools)
	if err := r.Client.Patch(ctx, class, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(v1alpha1.FieldManagerController)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the finalizer of class %s: %w", class.Name, err)
	}
	return nil
}
