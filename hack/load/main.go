// Command load is the workload of the project's local load image (hack/pause/image,
// LoadName): what a co-located pod does to a node when the end-to-end tests and
// `make bench-delivery` check that the pool's slice is delivered.
//
//	load cpu THREADS            burn THREADS cores until killed; writes "burning THREADS"
//	                            first
//	load mem STEP_MIB [MAX_MIB] map and touch STEP_MIB more anonymous memory, then write
//	                            "held N MiB", over and over, until the kernel or kubelet
//	                            ends it — or, with MAX_MIB, until it holds that much, which
//	                            it then holds until killed
//
// Memory is mapped outside the Go heap and every page is written, so all of it is charged
// to the container's cgroup and nothing gives it back while the process lives.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
)

const mib = 1 << 20

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) < 2 || len(args) > 3 || (args[0] == "cpu" && len(args) != 2) {
		return errors.New("usage: load cpu THREADS | load mem STEP_MIB [MAX_MIB]")
	}
	var n [2]int
	for i, a := range args[1:] {
		v, err := strconv.Atoi(a)
		if err != nil || v <= 0 {
			return fmt.Errorf("%s: want a positive integer, got %q", args[0], a)
		}
		n[i] = v
	}
	switch args[0] {
	case "cpu":
		return burn(n[0])
	case "mem":
		return eat(n[0], n[1])
	}
	return fmt.Errorf("unknown load %q: want cpu or mem", args[0])
}

// burn keeps n threads busy forever.
func burn(n int) error {
	runtime.GOMAXPROCS(n + 1)
	for range n - 1 {
		go spin()
	}
	if _, err := fmt.Printf("burning %d\n", n); err != nil {
		return err
	}
	spin()
	return nil
}

//go:noinline
func spin() {
	for x := uint64(1); ; x = x*6364136223846793005 + 1442695040888963407 {
		_ = x
	}
}

// eat maps and touches stepMiB MiB at a time, saying how much it holds after each step,
// until it holds maxMiB (0: no end), which it then holds.
func eat(stepMiB, maxMiB int) error {
	page := os.Getpagesize()
	for held := stepMiB; maxMiB == 0 || held <= maxMiB; held += stepMiB {
		mem, err := syscall.Mmap(-1, 0, stepMiB*mib, syscall.PROT_READ|syscall.PROT_WRITE,
			syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
		if err != nil {
			return fmt.Errorf("mapping %d MiB more than %d: %w", stepMiB, held-stepMiB, err)
		}
		for i := 0; i < len(mem); i += page {
			mem[i] = 1
		}
		if _, err := fmt.Printf("held %d MiB\n", held); err != nil {
			return err
		}
	}
	stop := make(chan os.Signal, 1) // hold it until stopped
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	return nil
}
