package hollow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentcube/sandboxpool/agent"
	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
)

// NodeCtl is a node-ctl simulated in process: it applies the config file the agent wrote
// (read and validated as the reference node-ctl does) without a cgroup, and reports no
// memory in use. It answers what the agent asks, with no socket in between.
type NodeCtl struct {
	configPath string
	zone       string
	started    time.Time

	mu    sync.Mutex // guards state and down
	state api.State
	down  bool
}

var _ agent.NodeCtl = (*NodeCtl)(nil)

// NewNodeCtl returns a running simulated node-ctl that reads its config at configPath.
func NewNodeCtl(configPath, zone string) *NodeCtl {
	now := time.Now().UTC()
	return &NodeCtl{configPath: configPath, zone: zone, started: now,
		state: api.State{APIVersion: api.APIVersion, Zone: zone, StartedAt: now, CgroupVersion: "hollow"}}
}

// errDown is what a stopped simulated node-ctl answers, like a socket nobody listens on.
var errDown = errors.New("hollow node-ctl is down")

// SetDown makes the simulated node-ctl stop (true) or start again (false) answering.
func (n *NodeCtl) SetDown(down bool) {
	n.mu.Lock()
	n.down = down
	n.mu.Unlock()
}

// Health implements agent.NodeCtl.
func (n *NodeCtl) Health(context.Context) (*api.Health, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, errDown
	}
	return &api.Health{APIVersion: api.APIVersion, Status: api.HealthOK}, nil
}

// State implements agent.NodeCtl.
func (n *NodeCtl) State(context.Context) (*api.State, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, errDown
	}
	st := n.state
	return &st, nil
}

// Reload implements agent.NodeCtl: it reads, validates and applies the config file.
func (n *NodeCtl) Reload(context.Context) (*api.State, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, errDown
	}
	now := time.Now().UTC()
	cfg, err := readConfig(n.configPath)
	if err != nil {
		n.state.LastReloadTime, n.state.LastReloadError = &now, &api.Error{Message: err.Error()}
		return nil, fmt.Errorf("%w: %w", nodectl.ErrRejected, err)
	}
	mem := resource.MustParse(cfg.Resources[api.ResourceMemory]) // validated
	n.state.Pool, n.state.AppliedGeneration = cfg.Pool, cfg.Generation
	n.state.AppliedResources, n.state.AppliedAt = cfg.Resources, &now
	n.state.AllocatableMemoryBytes = mem.Value()
	n.state.LastReloadTime, n.state.LastReloadError = &now, nil
	st := n.state
	return &st, nil
}

// Applied is the generation and resources of the applied config (0 and nil before one).
func (n *NodeCtl) Applied() (int64, map[string]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state.AppliedGeneration, n.state.AppliedResources
}

func readConfig(path string) (api.Config, error) {
	var cfg api.Config
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading the config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("decoding the config %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
