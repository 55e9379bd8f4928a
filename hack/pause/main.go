// Command pause is the process of the project's local pause image (hack/pause/image): it
// waits for SIGINT or SIGTERM and exits 0, reaping the children it adopts as a pod's PID 1
// meanwhile, like Kubernetes' pause. Built static, it is the image's only file, so tests
// and the local stack need no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
