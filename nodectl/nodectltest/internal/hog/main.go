// Command hog is the memory hog of nodectltest.StartHog: it waits for one line on stdin
// (sent once it has been moved into the cgroup under test), maps and touches the number of
// MiB given as its argument, writes "allocated" to stdout, and holds the memory until stdin
// is closed. A hog asking for more than its cgroup allows is OOM-killed while touching.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

const mib = 1 << 20

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: hog MIB")
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n <= 0 {
		return fmt.Errorf("MIB must be a positive integer, got %q", os.Args[1])
	}
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the go-ahead: %w", err)
	}
	// An anonymous private mapping outside the Go heap: every page written is charged to
	// the cgroup, and nothing (no GC, no swap here) gives it back while the hog lives.
	mem, err := syscall.Mmap(-1, 0, n*mib, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mapping %d MiB: %w", n, err)
	}
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 1
	}
	if _, err := fmt.Println("allocated"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // hold the memory until stdin closes
	return syscall.Munmap(mem)
}
