//go:build pins

// Package pins keeps the dependencies that later components will use pinned in go.mod
// before any code imports them: containerd's shim library for containerd-shim-placeholder-v2
// and cgroups v3 for the reference node-ctl. `go mod tidy` honours every build tag, so these
// requirements stay; the "pins" tag keeps them out of every build until then.
package pins

import (
	_ "github.com/containerd/cgroups/v3"
	_ "github.com/containerd/containerd/v2/pkg/shim"
)
