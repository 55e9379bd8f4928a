package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	nodev1 "k8s.io/api/node/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/agentcube/sandboxpool/policy"
)

// RuntimeClasses mirrors the cluster's RuntimeClasses (name and handler) into the policy's
// data.inventory.runtime_classes, which the rule on spec.placeholderPod.runtimeClassName
// reads (bundles/sandboxpool/lib/runtimeclass.rego). It is a ResourceEventHandler of a
// RuntimeClass informer; once the informer has delivered its first list, Run marks the
// inventory synced. Until then the policy refuses every class or pool that names a
// RuntimeClass, and /readyz fails, so the Service sends the webhook nothing to decide.
type RuntimeClasses struct {
	engine *policy.Engine
	log    logr.Logger
	// registration is the handler's registration with the informer; nil until Register.
	registration atomic.Pointer[toolscache.ResourceEventHandlerRegistration]
	synced       atomic.Bool
}

var _ toolscache.ResourceEventHandler = (*RuntimeClasses)(nil)

// NewRuntimeClasses returns a RuntimeClasses that writes to engine, made WithRuntimeClasses.
func NewRuntimeClasses(engine *policy.Engine, log logr.Logger) *RuntimeClasses {
	return &RuntimeClasses{engine: engine, log: log}
}

// Register adds the handler to informer's event handlers; call it once.
func (rc *RuntimeClasses) Register(informer PoolInformer) error {
	if rc.registration.Load() != nil {
		return errors.New("the RuntimeClass inventory is already registered with an informer")
	}
	reg, err := informer.AddEventHandler(rc)
	if err != nil {
		return fmt.Errorf("adding the RuntimeClass inventory's event handler: %w", err)
	}
	rc.registration.Store(&reg)
	return nil
}

// Run waits until the informer's first list is in the inventory, marks it synced in the
// policy, and returns (a manager Runnable).
func (rc *RuntimeClasses) Run(ctx context.Context) error {
	reg := rc.registration.Load()
	if reg == nil {
		return errors.New("the RuntimeClass inventory is not registered with an informer")
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), (*reg).HasSynced) {
		return nil // stopped before the first list
	}
	if err := rc.engine.SetRuntimeClassesSynced(ctx); err != nil {
		return err
	}
	rc.synced.Store(true)
	rc.log.Info("RuntimeClasses synced")
	return nil
}

// HasSynced reports whether the policy judges RuntimeClasses against the cluster's.
func (rc *RuntimeClasses) HasSynced() bool { return rc.synced.Load() }

// OnAdd upserts the RuntimeClass.
func (rc *RuntimeClasses) OnAdd(obj any, _ bool) { rc.upsert(obj) }

// OnUpdate upserts the new RuntimeClass (its handler is immutable, but a RuntimeClass
// deleted and created again under the same name may have another).
func (rc *RuntimeClasses) OnUpdate(_, obj any) { rc.upsert(obj) }

// OnDelete removes the RuntimeClass; obj may be a tombstone (DeletedFinalStateUnknown).
func (rc *RuntimeClasses) OnDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	c, ok := obj.(*nodev1.RuntimeClass)
	if !ok {
		rc.log.Error(nil, "RuntimeClass inventory: ignoring a deleted object that is not a RuntimeClass", "type", typeName(obj))
		return
	}
	if err := rc.engine.DeleteRuntimeClass(context.Background(), c.Name); err != nil {
		rc.log.Error(err, "RuntimeClass inventory: removing", "runtimeClass", c.Name)
	}
}

func (rc *RuntimeClasses) upsert(obj any) {
	c, ok := obj.(*nodev1.RuntimeClass)
	if !ok {
		rc.log.Error(nil, "RuntimeClass inventory: ignoring an object that is not a RuntimeClass", "type", typeName(obj))
		return
	}
	// The in-memory store has no I/O to cancel; the event handler has no context.
	if err := rc.engine.UpsertRuntimeClass(context.Background(), c.Name, c.Handler); err != nil {
		rc.log.Error(err, "RuntimeClass inventory: writing", "runtimeClass", c.Name)
	}
}
