package nodectltest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/server"
	"github.com/agentcube/sandboxpool/tests/support"
)

// FakeCgroup is an in-memory server.Cgroup that behaves like a cgroup v1 kernel: a memory
// limit below the usage is refused with cgroup.ErrMemoryInUse and changes nothing.
type FakeCgroup struct {
	path string

	// mu guards every field below.
	mu       sync.Mutex
	limits   *cgroup.Limits // nil until the first successful Apply
	usage    int64
	applyErr error
	statsErr error
	applies  int
	deleted  bool
}

var _ server.Cgroup = (*FakeCgroup)(nil)

// NewFakeCgroup returns an empty fake cgroup at path.
func NewFakeCgroup(path string) *FakeCgroup { return &FakeCgroup{path: path} }

// Path implements server.Cgroup.
func (f *FakeCgroup) Path() string { return f.path }

// Version implements server.Cgroup.
func (f *FakeCgroup) Version() string { return "fake" }

// Apply implements server.Cgroup.
func (f *FakeCgroup) Apply(l cgroup.Limits) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++
	if f.applyErr != nil {
		return f.applyErr
	}
	if l.MemoryBytes < f.usage {
		return fmt.Errorf("setting memory limit to %d bytes: %w", l.MemoryBytes, cgroup.ErrMemoryInUse)
	}
	f.limits = &l
	return nil
}

// Stats implements server.Cgroup. The working set is the whole usage.
func (f *FakeCgroup) Stats() (cgroup.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statsErr != nil {
		return cgroup.Stats{}, f.statsErr
	}
	s := cgroup.Stats{MemoryUsageBytes: f.usage, MemoryWorkingSetBytes: f.usage}
	if f.limits != nil {
		s.MemoryLimitBytes = f.limits.MemoryBytes
	}
	return s, nil
}

// Delete implements server.Cgroup.
func (f *FakeCgroup) Delete() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = true
	return nil
}

// SetUsage sets the memory the fake's "sandboxes" use.
func (f *FakeCgroup) SetUsage(bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.usage = bytes
}

// FailApply makes every Apply return err (nil: succeed again).
func (f *FakeCgroup) FailApply(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applyErr = err
}

// FailStats makes every Stats return err (nil: succeed again).
func (f *FakeCgroup) FailStats(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsErr = err
}

// Limits returns the limits in force and whether any were applied.
func (f *FakeCgroup) Limits() (cgroup.Limits, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.limits == nil {
		return cgroup.Limits{}, false
	}
	return *f.limits, true
}

// Applies counts the Apply calls, failed ones included.
func (f *FakeCgroup) Applies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies
}

// Deleted reports whether Delete was called.
func (f *FakeCgroup) Deleted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleted
}

// FakeOptions configure StartFake.
type FakeOptions struct {
	// Zone is reported in the state.
	Zone string
	// Config, when set, is written before the server starts, so it applies it at start.
	Config *api.Config
	// DeleteCgroupOnExit is passed to the server.
	DeleteCgroupOnExit bool
}

// Fake is an in-process reference node-ctl serving on a real unix socket, with a
// FakeCgroup: the contract end to end, without root.
type Fake struct {
	*server.Server
	SocketPath, ConfigPath string
	Cgroup                 *FakeCgroup
	Client                 *client.Client

	cancel context.CancelFunc
	exited chan struct{} // closed when Run returned
	runErr error         // Run's error, set before exited is closed
}

// StartFake starts a Fake and waits until it is healthy. t's cleanup stops it.
func StartFake(t testing.TB, opts FakeOptions) *Fake {
	t.Helper()
	dir := support.ShortTempDir(t)
	f := &Fake{
		SocketPath: filepath.Join(dir, "nc.sock"),
		ConfigPath: filepath.Join(dir, "node-ctl.json"),
		Cgroup:     NewFakeCgroup("/fake-sandbox-pool"),
		exited:     make(chan struct{}),
	}
	f.Client = client.New(f.SocketPath)
	if opts.Config != nil {
		WriteConfig(t, f.ConfigPath, *opts.Config)
	}
	srv, err := server.New(server.Options{
		SocketPath:         f.SocketPath,
		ConfigPath:         f.ConfigPath,
		Zone:               opts.Zone,
		Cgroup:             f.Cgroup,
		DeleteCgroupOnExit: opts.DeleteCgroupOnExit,
		Logger:             testLogger(t),
	})
	if err != nil {
		t.Fatalf("creating the node-ctl server: %v", err)
	}
	f.Server = srv
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		f.runErr = srv.Run(ctx)
		close(f.exited)
	}()
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fake node-ctl: %v", err)
		}
	})
	WaitHealthy(t, f.Client, f.exited)
	return f
}

// Stop stops the server gracefully and returns Run's error. It may be called again.
func (f *Fake) Stop() error {
	f.cancel()
	select {
	case <-f.exited:
		return f.runErr
	case <-time.After(processTimeout):
		return errors.New("the fake node-ctl did not stop")
	}
}
