package task

import (
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"

	"github.com/agentcube/sandboxpool/shim/agentclient"
)

// NewFromPlugin builds the task service in the shim's TTRPC plugin: the shim's event
// publisher and shutdown service, and the placeholder agent configured from the shim's
// environment (agentclient.ConfigFromEnv).
func NewFromPlugin(ic *plugin.InitContext) (taskAPI.TTRPCTaskService, error) {
	pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
	if err != nil {
		return nil, err
	}
	ss, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
	if err != nil {
		return nil, err
	}
	cfg, err := agentclient.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return NewTaskService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service), agentclient.New(cfg))
}
