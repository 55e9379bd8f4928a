package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// MachineLockFile is the file a stack holds locked while it runs. One stack runs on a
// machine at a time: kube-proxy's iptables rules, the CNI bridge and the clean-up of stale
// stacks (CleanStale) are the machine's, not the stack's.
var MachineLockFile = filepath.Join(os.TempDir(), "sandboxpool-stack.lock")

// LockMachine takes the machine's stack lock, waiting (and saying so through logf) while
// another stack — a test suite's or make demo's — holds it. The lock goes with the process,
// so a stack killed mid-run does not keep it.
func LockMachine(logf func(string, ...any)) (unlock func(), err error) {
	f, err := os.OpenFile(MachineLockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the machine's stack lock: %w", err)
	}
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		logf("another stack runs on this machine (%s is locked): waiting for it to stop", MachineLockFile)
		if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", MachineLockFile, err)
		}
	}
	return func() { _ = f.Close() }, nil
}
