// Package support is the generic test support every suite shares: free ports, go build,
// polling with the last observed state, HTTP probes and child processes. It imports no
// package of this module, so unit tests inside product packages can use it without an
// import cycle.
package support

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PickFreeAddr returns a loopback address whose port was free a moment ago.
func PickFreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreeAddr is PickFreeAddr for a test: it fails t when no port is free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickFreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// GoBuild builds main packages with the go command.
type GoBuild struct {
	// Dir is where the go command runs: a directory inside this module.
	Dir string
	// Out is the directory the binaries are written to, each named after its package.
	Out string
	// Static builds without cgo and with -trimpath: binaries installed on a node.
	Static bool
}

// Run builds pkgs (paths relative to Dir or import paths) into Out.
func (b GoBuild) Run(ctx context.Context, pkgs ...string) error {
	args := []string{"build"}
	if b.Static {
		args = append(args, "-trimpath")
	}
	args = append(args, "-o", b.Out+string(filepath.Separator))
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = b.Dir
	if b.Static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// BuildBinary builds the main package pkg (e.g. "./cmd/sandboxpool-controller", relative
// to root) into dir and returns the binary's path.
func BuildBinary(root, dir, pkg string) (string, error) {
	if err := (GoBuild{Dir: root, Out: dir}).Run(context.Background(), pkg); err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(pkg)), nil
}

// ErrStopped is returned by Poll when its stop channel closes before the condition holds.
var ErrStopped = errors.New("stopped before the condition held")

// Poll checks cond every interval (the first time at once) until it holds, timeout passes,
// ctx ends or stop (when not nil) closes. The error names the timeout and cond's last
// state. cond's error ends the poll with that error.
func Poll(ctx context.Context, interval, timeout time.Duration, stop <-chan struct{}, cond func() (bool, string, error)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(context.Context) (bool, error) {
		select {
		case <-stop:
			return false, ErrStopped
		default:
		}
		ok, state, err := cond()
		last = state
		return ok, err
	})
	switch {
	case err == nil:
		return nil
	case wait.Interrupted(err) && ctx.Err() == nil:
		return fmt.Errorf("not within %s; last state: %s", timeout, last)
	case wait.Interrupted(err):
		return fmt.Errorf("%w; last state: %s", ctx.Err(), last)
	default:
		return fmt.Errorf("%w; last state: %s", err, last)
	}
}

// Eventually polls cond every interval until it holds, and fails t with what and cond's
// last state when it does not within the given time. It returns how long it took.
func Eventually(t testing.TB, what string, within, interval time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	began := time.Now()
	if err := Poll(context.Background(), interval, within, nil, func() (bool, string, error) {
		ok, state := cond()
		return ok, state, nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return time.Since(began)
}

// HTTPGet returns the status code and body of a GET of url (0 and the error text when the
// request fails).
func HTTPGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ShortTempDir is a temporary directory below /tmp, short enough for unix socket paths (at
// most 108 bytes; t.TempDir and $TMPDIR can be longer), removed by t's cleanup.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sp")
	if err != nil {
		t.Fatalf("creating a temporary directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Context is t's context with a timeout, cancelled by t's cleanup.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}
