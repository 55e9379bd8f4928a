package main

import (
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"

	"github.com/agentcube/sandboxpool/shim/task"
	"github.com/agentcube/sandboxpool/tests/shim/failpoint"
)

func init() {
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			// The shim's working directory is the bundle of the task it was started for.
			spec, err := task.ReadSpec(".")
			if err != nil {
				return nil, err
			}
			fps, err := failpoint.FromAnnotations(spec.Annotations)
			if err != nil {
				return nil, err
			}
			svc, err := task.NewFromPlugin(ic)
			if err != nil {
				return nil, err
			}
			return &withFailpoints{local: svc, fps: fps}, nil
		},
	})
}

var (
	_ = shim.TTRPCService(&withFailpoints{})
	_ = shim.TTRPCServerUnaryOptioner(&withFailpoints{})
)

// withFailpoints serves the task service behind the failpoint interceptor.
type withFailpoints struct {
	local taskAPI.TTRPCTaskService
	fps   map[string]*failpoint.Failpoint
}

func (s *withFailpoints) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s.local)
	return nil
}

func (s *withFailpoints) UnaryServerInterceptor() ttrpc.UnaryServerInterceptor {
	return failpoint.Interceptor(s.fps)
}
