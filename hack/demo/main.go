// Command demo runs the whole SandboxPool system on this machine (`make demo`) and tears it
// down again (`make demo-down`). It needs root.
//
//	demo up    [flags]   start the stack in the background, apply the examples, wait for the
//	                     pool to be Ready and show it
//	demo down  [flags]   stop exactly what `up` started (PIDs from the state file), remove
//	                     its directories, cgroups and bridge
//	demo serve [flags]   run the stack in the foreground (what `up` starts in the background)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/agentcube/sandboxpool/hack/demo/internal/demo"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo up|down|serve [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	o := demo.DefaultOptions()
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[2:])
	var err error
	switch cmd {
	case "up":
		err = demo.Up(o)
	case "down":
		err = demo.Down(o)
	case "serve":
		err = demo.Serve(o)
	default:
		err = fmt.Errorf("unknown command %q: want up, down or serve", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
