// Command containerd-shim-placeholder-fp-v2 is the placeholder shim with failpoints
// (runtime type io.containerd.placeholder-fp.v2), for tests only: the same manager and task
// service, with the faults the task's annotations ask for injected in front of the task
// API (see package failpoint). Modelled on containerd's containerd-shim-runc-fp-v1.
package main

import (
	"context"

	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/agentcube/sandboxpool/shim/manager"
)

func main() {
	shim.RunShim(context.Background(), manager.NewShimManager("io.containerd.placeholder-fp.v2"), manager.Options)
}
