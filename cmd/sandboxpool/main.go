// Command sandboxpool is the user CLI. `sandboxpool vet FILE...` checks classes and pools
// offline: the CUE schema the CRDs are generated from, then the admission webhook's Rego
// policy.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/agentcube/sandboxpool/cmd/sandboxpool/internal/vet"
)

const usage = `usage: sandboxpool vet [flags] FILE...

Commands:
  vet   check SandboxPoolClass and SandboxPool YAML files with the admission rules
        (run 'sandboxpool vet -h' for its flags)
`

func main() {
	if len(os.Args) < 2 || os.Args[1] != "vet" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(vet.Run(context.Background(), os.Args[2:], os.Stdout, os.Stderr))
}
