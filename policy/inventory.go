package policy

import (
	"context"
	"fmt"
	"maps"

	"github.com/open-policy-agent/opa/v1/storage"
)

// The inventory is data.inventory.pools (pool name -> {"class", "nodeName"}) plus the
// index data.inventory.nodes (node name -> pool name -> class) the policy reads, so that a
// pool CREATE looks its node up instead of scanning every pool. Each change writes both in
// one transaction, so an evaluation never sees them disagree.

// inventory is the engine's copy of data.inventory.
type inventory struct {
	pools map[string]PoolRef
	nodes map[string]map[string]string // node -> pool -> class
	// runtimeClasses maps a RuntimeClass to its handler; nil when the engine does not check
	// RuntimeClasses (WithRuntimeClasses). synced says it holds the cluster's.
	runtimeClasses map[string]string
	synced         bool
}

func newInventory(pools map[string]PoolRef) inventory {
	inv := inventory{pools: make(map[string]PoolRef, len(pools)), nodes: map[string]map[string]string{}}
	for name, ref := range pools {
		inv.pools[name] = ref
		if inv.nodes[ref.NodeName] == nil {
			inv.nodes[ref.NodeName] = map[string]string{}
		}
		inv.nodes[ref.NodeName][name] = ref.Class
	}
	return inv
}

// value is data.inventory.
func (inv inventory) value() map[string]any {
	pools := make(map[string]any, len(inv.pools))
	for name, ref := range inv.pools {
		pools[name] = ref.value()
	}
	nodes := make(map[string]any, len(inv.nodes))
	for node, entry := range inv.nodes {
		nodes[node] = nodeValue(entry)
	}
	out := map[string]any{dataPools: pools, dataNodes: nodes}
	if inv.runtimeClasses != nil {
		rcs := make(map[string]any, len(inv.runtimeClasses))
		for name, handler := range inv.runtimeClasses {
			rcs[name] = runtimeClassValue(handler)
		}
		out[dataRuntimeClasses], out[dataRuntimeClassesSynced] = rcs, inv.synced
	}
	return out
}

func runtimeClassValue(handler string) map[string]any { return map[string]any{"handler": handler} }

func (p PoolRef) value() map[string]any {
	return map[string]any{"class": p.Class, "nodeName": p.NodeName}
}

func nodeValue(entry map[string]string) map[string]any {
	out := make(map[string]any, len(entry))
	for pool, class := range entry {
		out[pool] = class
	}
	return out
}

// SetInventory replaces the inventory with pools (pool name -> PoolRef), e.g. after an
// informer's initial list.
func (e *Engine) SetInventory(ctx context.Context, pools map[string]PoolRef) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	inv := newInventory(pools)
	inv.runtimeClasses, inv.synced = e.inv.runtimeClasses, e.inv.synced
	if err := storage.WriteOne(ctx, e.store, storage.ReplaceOp, storage.Path{dataInventory}, inv.value()); err != nil {
		return fmt.Errorf("writing data.%s: %w", dataInventory, err)
	}
	e.inv = inv
	return nil
}

// UpsertPool adds or replaces one pool of the inventory (an informer's add or update)
// without rewriting the others.
func (e *Engine) UpsertPool(ctx context.Context, name string, ref PoolRef) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old, had := e.inv.pools[name]
	if had && old == ref {
		return nil
	}
	nodes := map[string]map[string]string{}
	if had {
		nodes[old.NodeName] = without(e.inv.nodes[old.NodeName], name)
	}
	entry, ok := nodes[ref.NodeName]
	if !ok {
		entry = maps.Clone(e.inv.nodes[ref.NodeName])
	}
	if entry == nil {
		entry = map[string]string{}
	}
	entry[name] = ref.Class
	nodes[ref.NodeName] = entry

	if err := e.write(ctx, name, &ref, nodes); err != nil {
		return fmt.Errorf("writing pool %s to data.%s: %w", name, dataInventory, err)
	}
	e.inv.pools[name] = ref
	e.inv.apply(nodes)
	return nil
}

// DeletePool removes one pool from the inventory; a pool not there is no error.
func (e *Engine) DeletePool(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old, had := e.inv.pools[name]
	if !had {
		return nil
	}
	nodes := map[string]map[string]string{old.NodeName: without(e.inv.nodes[old.NodeName], name)}
	if err := e.write(ctx, name, nil, nodes); err != nil {
		return fmt.Errorf("removing pool %s from data.%s: %w", name, dataInventory, err)
	}
	delete(e.inv.pools, name)
	e.inv.apply(nodes)
	return nil
}

// write stores pool name (removes it when ref is nil) and the new index entries of nodes
// (an empty entry removes the node) in one transaction.
func (e *Engine) write(ctx context.Context, name string, ref *PoolRef, nodes map[string]map[string]string) error {
	return storage.Txn(ctx, e.store, storage.WriteParams, func(txn storage.Transaction) error {
		path := storage.Path{dataInventory, dataPools, name}
		var err error
		if ref != nil {
			err = e.store.Write(ctx, txn, storage.AddOp, path, ref.value())
		} else {
			err = e.store.Write(ctx, txn, storage.RemoveOp, path, nil)
		}
		if err != nil {
			return err
		}
		for node, entry := range nodes {
			path := storage.Path{dataInventory, dataNodes, node}
			if len(entry) > 0 {
				err = e.store.Write(ctx, txn, storage.AddOp, path, nodeValue(entry))
			} else if err = e.store.Write(ctx, txn, storage.RemoveOp, path, nil); storage.IsNotFound(err) {
				err = nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// apply records the index entries write stored.
func (inv inventory) apply(nodes map[string]map[string]string) {
	for node, entry := range nodes {
		if len(entry) == 0 {
			delete(inv.nodes, node)
		} else {
			inv.nodes[node] = entry
		}
	}
}

// without is a copy of entry without pool.
func without(entry map[string]string, pool string) map[string]string {
	out := maps.Clone(entry)
	delete(out, pool)
	return out
}

// errNoRuntimeClasses is returned by the RuntimeClass writes of an engine made without
// WithRuntimeClasses.
var errNoRuntimeClasses = fmt.Errorf("the engine does not check RuntimeClasses (no WithRuntimeClasses)")

// UpsertRuntimeClass adds or replaces one RuntimeClass of data.inventory.runtime_classes (an
// informer's add or update).
func (e *Engine) UpsertRuntimeClass(ctx context.Context, name, handler string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inv.runtimeClasses == nil {
		return errNoRuntimeClasses
	}
	if old, had := e.inv.runtimeClasses[name]; had && old == handler {
		return nil
	}
	path := storage.Path{dataInventory, dataRuntimeClasses, name}
	if err := storage.WriteOne(ctx, e.store, storage.AddOp, path, runtimeClassValue(handler)); err != nil {
		return fmt.Errorf("writing RuntimeClass %s to data.%s: %w", name, dataInventory, err)
	}
	e.inv.runtimeClasses[name] = handler
	return nil
}

// DeleteRuntimeClass removes one RuntimeClass; one not there is no error.
func (e *Engine) DeleteRuntimeClass(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inv.runtimeClasses == nil {
		return errNoRuntimeClasses
	}
	if _, had := e.inv.runtimeClasses[name]; !had {
		return nil
	}
	path := storage.Path{dataInventory, dataRuntimeClasses, name}
	if err := storage.WriteOne(ctx, e.store, storage.RemoveOp, path, nil); err != nil {
		return fmt.Errorf("removing RuntimeClass %s from data.%s: %w", name, dataInventory, err)
	}
	delete(e.inv.runtimeClasses, name)
	return nil
}

// SetRuntimeClassesSynced records that data.inventory.runtime_classes holds the cluster's
// RuntimeClasses (the informer's initial list has been delivered): from then on the policy
// judges the RuntimeClass a request names instead of denying it.
func (e *Engine) SetRuntimeClassesSynced(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inv.runtimeClasses == nil {
		return errNoRuntimeClasses
	}
	if e.inv.synced {
		return nil
	}
	path := storage.Path{dataInventory, dataRuntimeClassesSynced}
	if err := storage.WriteOne(ctx, e.store, storage.ReplaceOp, path, true); err != nil {
		return fmt.Errorf("writing data.%s.%s: %w", dataInventory, dataRuntimeClassesSynced, err)
	}
	e.inv.synced = true
	return nil
}
