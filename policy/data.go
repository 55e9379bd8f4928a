package policy

import (
	"errors"
	"slices"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Paths of the data the engine supplies to the policy, outside the bundle roots.
const (
	// dataConfig is data.config: who the controller is and how per-node service accounts
	// are named.
	dataConfig = "config"
	// dataInventory is data.inventory; its pools member maps a pool name to a PoolRef, as
	// Gatekeeper's data.inventory mirrors cluster objects.
	dataInventory = "inventory"
	dataPools     = "pools"
	// dataNodes is data.inventory.nodes, the index of pools by node the engine derives:
	// node name -> pool name -> class.
	dataNodes = "nodes"
)

// Defaults of Config.
const (
	// DefaultNamespace is the namespace of the default install: the controller's and the
	// per-node agent service accounts live there.
	DefaultNamespace = v1alpha1.DefaultSystemNamespace
	// DefaultNodeServiceAccountPrefix starts the name of every per-node agent service
	// account; the node name follows it.
	DefaultNodeServiceAccountPrefix = "placeholder-agent-"
	// DefaultControllerUsername is the controller's service account in the default install.
	DefaultControllerUsername = "system:serviceaccount:" + DefaultNamespace + ":sandbox-pool-controller"
)

// Config is data.config: the identities the status-scoping rule trusts.
type Config struct {
	// ControllerUsernames are the usernames of the SandboxPool controller.
	ControllerUsernames []string `json:"controller_usernames"`
	// ControllerGroups are groups whose members act as the controller.
	ControllerGroups []string `json:"controller_groups"`
	// NodeServiceAccountNamespace and NodeServiceAccountPrefix name the per-node agent
	// service accounts: the agent of node N may authenticate as
	// system:serviceaccount:<NodeServiceAccountNamespace>:<NodeServiceAccountPrefix>N.
	// Both empty turns per-node service accounts off (only system:node:N is trusted).
	NodeServiceAccountNamespace string `json:"node_service_account_namespace"`
	NodeServiceAccountPrefix    string `json:"node_service_account_prefix"`
}

// DefaultConfig is the configuration of the default install.
func DefaultConfig() Config {
	return Config{
		ControllerUsernames:         []string{DefaultControllerUsername},
		NodeServiceAccountNamespace: DefaultNamespace,
		NodeServiceAccountPrefix:    DefaultNodeServiceAccountPrefix,
	}
}

// Validate reports a configuration the policy would read in a surprising way.
func (c Config) Validate() error {
	if (c.NodeServiceAccountNamespace == "") != (c.NodeServiceAccountPrefix == "") {
		return errors.New("policy config: set both node_service_account_namespace and node_service_account_prefix, or neither")
	}
	if len(c.ControllerUsernames) == 0 && len(c.ControllerGroups) == 0 {
		return errors.New("policy config: no controller identity; set controller_usernames or controller_groups")
	}
	return nil
}

// value is Config as the JSON-shaped value stored at data.config.
func (c Config) value() map[string]any {
	return map[string]any{
		"controller_usernames":           anyStrings(c.ControllerUsernames),
		"controller_groups":              anyStrings(c.ControllerGroups),
		"node_service_account_namespace": c.NodeServiceAccountNamespace,
		"node_service_account_prefix":    c.NodeServiceAccountPrefix,
	}
}

func anyStrings(in []string) []any {
	out := make([]any, 0, len(in))
	for _, s := range slices.Sorted(slices.Values(in)) {
		out = append(out, s)
	}
	return out
}

// PoolRef is what the policy knows of an existing pool: data.inventory.pools[name].
type PoolRef struct {
	// Class is spec.classRef.name.
	Class string `json:"class"`
	// NodeName is spec.nodeName.
	NodeName string `json:"nodeName"`
}
