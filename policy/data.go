package policy

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Paths of the data the engine supplies to the policy, outside the bundle roots.
const (
	// dataConfig is data.config: who the controller and the operators are.
	dataConfig = "config"
	// dataInventory is data.inventory; its pools member maps a pool name to a PoolRef, as
	// Gatekeeper's data.inventory mirrors cluster objects.
	dataInventory = "inventory"
	dataPools     = "pools"
	// dataNodes is data.inventory.nodes, the index of pools by node the engine derives:
	// node name -> pool name -> class.
	dataNodes = "nodes"
	// dataRuntimeClasses is data.inventory.runtime_classes: RuntimeClass name ->
	// {"handler": ...}, with WithRuntimeClasses; dataRuntimeClassesSynced says whether it
	// holds the cluster's RuntimeClasses yet.
	dataRuntimeClasses       = "runtime_classes"
	dataRuntimeClassesSynced = "runtime_classes_synced"
)

// Defaults of Config.
const (
	// DefaultNamespace is the namespace of the default install, where the controller's
	// service account lives.
	DefaultNamespace = v1alpha1.DefaultSystemNamespace
	// DefaultControllerUsername is the controller's service account in the default install.
	DefaultControllerUsername = "system:serviceaccount:" + DefaultNamespace + ":sandbox-pool-controller"
	// DefaultOperatorGroup is the group deploy/rbac binds the sandbox-pool-operator role to.
	DefaultOperatorGroup = v1alpha1.OperatorGroup
)

// Config is data.config: the identities the policy trusts, or limits, by name. A node is
// always known by its own identity, system:node:<node> in group system:nodes.
type Config struct {
	// ControllerUsernames are the usernames of the SandboxPool controller.
	ControllerUsernames []string `json:"controller_usernames"`
	// ControllerGroups are groups whose members act as the controller.
	ControllerGroups []string `json:"controller_groups"`
	// OperatorUsernames and OperatorGroups are the holders of the sandbox-pool-operator
	// role, who may change a pool's spec.override and nothing else of it.
	OperatorUsernames []string `json:"operator_usernames"`
	OperatorGroups    []string `json:"operator_groups"`
}

// DefaultConfig is the configuration of the default install.
func DefaultConfig() Config {
	return Config{
		ControllerUsernames: []string{DefaultControllerUsername},
		OperatorGroups:      []string{DefaultOperatorGroup},
	}
}

// Validate reports a configuration the policy would read in a surprising way.
func (c Config) Validate() error {
	if len(c.ControllerUsernames) == 0 && len(c.ControllerGroups) == 0 {
		return errors.New("policy config: no controller identity; set controller_usernames or controller_groups")
	}
	for _, u := range c.OperatorUsernames {
		if slices.Contains(c.ControllerUsernames, u) {
			return fmt.Errorf("policy config: %s is both the controller and an operator", u)
		}
	}
	for _, g := range c.OperatorGroups {
		if slices.Contains(c.ControllerGroups, g) {
			return fmt.Errorf("policy config: group %s is both the controller and operators", g)
		}
	}
	return nil
}

// value is Config as the JSON-shaped value stored at data.config.
func (c Config) value() map[string]any {
	return map[string]any{
		"controller_usernames": anyStrings(c.ControllerUsernames),
		"controller_groups":    anyStrings(c.ControllerGroups),
		"operator_usernames":   anyStrings(c.OperatorUsernames),
		"operator_groups":      anyStrings(c.OperatorGroups),
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
