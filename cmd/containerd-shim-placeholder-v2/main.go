// Command containerd-shim-placeholder-v2 is the placeholder runtime for containerd (runtime
// type io.containerd.placeholder.v2, CRI runtime handler "placeholder"): tasks without a
// process or a cgroup that report a normal lifecycle and tell the placeholder agent.
// See docs/shim.md.
package main

import (
	"context"

	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/agentcube/sandboxpool/shim/manager"
	_ "github.com/agentcube/sandboxpool/shim/task/plugin"
)

func main() {
	shim.RunShim(context.Background(), manager.NewShimManager(manager.RuntimeName), manager.Options)
}
