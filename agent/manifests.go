package agent

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/agentcube/sandboxpool/agent/manifest"
)

// watchManifests re-runs a pool's reconcile when its manifest file changes (fsnotify), and
// every pool's every ManifestVerifyInterval: a deleted or edited manifest is restored.
func (a *Agent) watchManifests(ctx context.Context) error {
	return manifest.Watch(ctx, a.opts.ManifestDir, a.opts.ManifestVerifyInterval,
		func(key string) { manifestEvents.Inc(); a.triggerFileKey(ctx, key) },
		func() { a.triggerAll(ctx) })
}

// triggerFileKey re-runs the reconcile of the pool whose manifest file is named with key
// (the pool name, or its hashed form for very long names: manifest.FileKey). A file of no
// pool of this node is left alone; only the start-up cleanup removes files.
func (a *Agent) triggerFileKey(ctx context.Context, key string) {
	pools, err := a.pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		if manifest.FileKey(p.Name) == key {
			a.trigger(p.Name)
		}
	}
}

func logOrphanReport(log logr.Logger, r manifest.Report) {
	for _, d := range r.Removed {
		log.Info("removed orphaned manifest", "file", d.Path, "pool", d.PoolName, "reason", d.Reason, "error", d.Err)
	}
	for _, d := range r.Kept {
		log.Info("kept manifest at start-up", "file", d.Path, "pool", d.PoolName, "reason", d.Reason, "error", d.Err)
	}
}
