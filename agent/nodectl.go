package agent

import (
	"context"

	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
)

// NodeCtl is what the agent asks node-ctl (docs/node-ctl-contract.md): its health, its
// state, and to apply the config file the agent wrote (Options.NodeCtlConfig). The client of
// nodectl/client speaks it over node-ctl's unix socket; the hollow-node mode of the scale
// benchmarks (agent/hollow) answers it in process.
type NodeCtl interface {
	Health(ctx context.Context) (*api.Health, error)
	State(ctx context.Context) (*api.State, error)
	Reload(ctx context.Context) (*api.State, error)
}

var _ NodeCtl = (*nodectl.Client)(nil)
