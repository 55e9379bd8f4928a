package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// PoolInformer is the part of a SandboxPool informer Inventory needs; client-go's
// SharedInformer and controller-runtime's cache.Informer both have it.
type PoolInformer interface {
	AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

// Inventory mirrors the cluster's SandboxPools into the policy's data.inventory.pools,
// which the single-class-per-node CREATE rule reads. It is a ResourceEventHandler of a
// cluster-wide SandboxPool informer: add and update upsert {class, nodeName}, delete
// (tombstones included) removes the pool.
type Inventory struct {
	engine *policy.Engine
	log    logr.Logger
	// registration is the handler's registration with the informer; nil until Register.
	registration atomic.Pointer[toolscache.ResourceEventHandlerRegistration]
}

var (
	_ toolscache.ResourceEventHandler = (*Inventory)(nil)
	_ PoolInformer                    = toolscache.SharedInformer(nil)
)

// NewInventory returns an Inventory that writes to engine.
func NewInventory(engine *policy.Engine, log logr.Logger) *Inventory {
	return &Inventory{engine: engine, log: log}
}

// Register adds the inventory to informer's event handlers; call it once.
func (inv *Inventory) Register(informer PoolInformer) error {
	if inv.registration.Load() != nil {
		return errors.New("inventory is already registered with an informer")
	}
	reg, err := informer.AddEventHandler(inv)
	if err != nil {
		return fmt.Errorf("adding the inventory's event handler: %w", err)
	}
	inv.registration.Store(&reg)
	return nil
}

// HasSynced reports whether the informer has listed the pools and the inventory has
// received all of them: until then a CREATE could miss a conflicting pool.
func (inv *Inventory) HasSynced() bool {
	reg := inv.registration.Load()
	return reg != nil && (*reg).HasSynced()
}

// OnAdd upserts the pool.
func (inv *Inventory) OnAdd(obj any, _ bool) { inv.upsert(obj) }

// OnUpdate upserts the new pool.
func (inv *Inventory) OnUpdate(_, obj any) { inv.upsert(obj) }

// OnDelete removes the pool; obj may be a tombstone (DeletedFinalStateUnknown).
func (inv *Inventory) OnDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pool, ok := obj.(*v1alpha1.SandboxPool)
	if !ok {
		inv.log.Error(nil, "inventory: ignoring a deleted object that is not a SandboxPool", "type", typeName(obj))
		return
	}
	// The in-memory store has no I/O to cancel; the event handler has no context.
	if err := inv.engine.DeletePool(context.Background(), pool.Name); err != nil {
		inv.log.Error(err, "inventory: removing pool", "pool", pool.Name)
	}
}

func (inv *Inventory) upsert(obj any) {
	pool, ok := obj.(*v1alpha1.SandboxPool)
	if !ok {
		inv.log.Error(nil, "inventory: ignoring an object that is not a SandboxPool", "type", typeName(obj))
		return
	}
	ref := policy.PoolRef{Class: pool.Spec.ClassRef.Name, NodeName: pool.Spec.NodeName}
	if err := inv.engine.UpsertPool(context.Background(), pool.Name, ref); err != nil {
		inv.log.Error(err, "inventory: writing pool", "pool", pool.Name)
	}
}

func typeName(obj any) string { return fmt.Sprintf("%T", obj) }
