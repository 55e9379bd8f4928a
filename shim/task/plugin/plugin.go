// Package plugin registers the placeholder task service as the shim's TTRPC plugin.
// Importing it is what makes a binary the placeholder shim
// (cmd/containerd-shim-placeholder-v2).
package plugin

import (
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"

	"github.com/agentcube/sandboxpool/shim/task"
)

func init() {
	registry.Register(&plugin.Registration{
		Type: plugins.TTRPCPlugin,
		ID:   "task",
		Requires: []plugin.Type{
			plugins.EventPlugin,
			plugins.InternalPlugin,
		},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			return task.NewFromPlugin(ic)
		},
	})
}
