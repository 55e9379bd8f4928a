package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/nodectl/server"
	"github.com/agentcube/sandboxpool/tests/support"
)

const mib = 1 << 20

func ctx(t *testing.T) context.Context {
	return support.Context(t, 10*time.Second)
}

// reloadErr reloads and returns the *client.StatusError node-ctl answered with.
func reloadErr(t *testing.T, c *client.Client) *client.StatusError {
	t.Helper()
	st, err := c.Reload(ctx(t))
	var serr *client.StatusError
	if !errors.As(err, &serr) {
		t.Fatalf("Reload = %+v, %v; want a *StatusError", st, err)
	}
	return serr
}

func mustState(t *testing.T, c *client.Client) *api.State {
	t.Helper()
	st, err := c.State(ctx(t))
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return st
}

func TestStartWithoutConfig(t *testing.T) {
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{Zone: "zone-a"})
	st := mustState(t, f.Client)
	if st.Applied() || st.AppliedGeneration != 0 || st.AppliedResources != nil || st.AppliedAt != nil {
		t.Errorf("state before any config claims something applied: %+v", st)
	}
	if st.LastReloadError == nil || st.LastReloadError.Reason != api.ReasonConfigNotFound {
		t.Errorf("LastReloadError = %+v, want ConfigNotFound", st.LastReloadError)
	}
	if st.Zone != "zone-a" || st.PID != os.Getpid() || st.CgroupPath != "/fake-sandbox-pool" ||
		st.CgroupVersion != "fake" || st.StartedAt.IsZero() || st.APIVersion != api.APIVersion {
		t.Errorf("identity fields wrong: %+v", st)
	}
	if _, ok := f.Cgroup.Limits(); ok {
		t.Errorf("limits applied without a config")
	}
	serr := reloadErr(t, f.Client)
	if serr.StatusCode != http.StatusBadRequest || serr.Body.Reason != api.ReasonConfigNotFound {
		t.Errorf("reload without a file = %v, want 400 ConfigNotFound", serr)
	}
}

func TestConfigAppliedAtStartAndOnReload(t *testing.T) {
	cfg := nodectltest.Config(1, "500m", "64Mi")
	cfg.Resources["example.com/gpu"] = "2"
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{Config: &cfg})

	st := mustState(t, f.Client)
	if !st.Applied() || st.AppliedGeneration != 1 || st.Pool != cfg.Pool || st.LastReloadError != nil {
		t.Fatalf("state after start with a config: %+v", st)
	}
	if st.AppliedResources["example.com/gpu"] != "2" || st.AppliedResources["memory"] != "64Mi" {
		t.Errorf("AppliedResources = %v, want the config's verbatim", st.AppliedResources)
	}
	if st.AllocatableMemoryBytes != 64*mib {
		t.Errorf("AllocatableMemoryBytes = %d, want %d", st.AllocatableMemoryBytes, 64*mib)
	}
	if l, _ := f.Cgroup.Limits(); l != (cgroup.Limits{CPUMilli: 500, MemoryBytes: 64 * mib}) {
		t.Errorf("cgroup limits = %+v", l)
	}

	f.Cgroup.SetUsage(10 * mib)
	nodectltest.WriteConfig(t, f.ConfigPath, nodectltest.Config(2, "2", "1Gi"))
	st, err := f.Client.Reload(ctx(t))
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if st.AppliedGeneration != 2 || st.AllocatableMemoryBytes != 1<<30 || st.AllocatedMemoryBytes != 10*mib {
		t.Errorf("state after raising = %+v", st)
	}
	if l, _ := f.Cgroup.Limits(); l != (cgroup.Limits{CPUMilli: 2000, MemoryBytes: 1 << 30}) {
		t.Errorf("cgroup limits = %+v", l)
	}
	if st.LastReloadTime == nil || st.AppliedAt == nil || st.AppliedAt.After(*st.LastReloadTime) {
		t.Errorf("reload times: appliedAt %v, lastReloadTime %v", st.AppliedAt, st.LastReloadTime)
	}
}

func TestBadConfigKeepsTheAppliedOne(t *testing.T) {
	cfg := nodectltest.Config(4, "1", "256Mi")
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{Config: &cfg})

	for _, tc := range []struct {
		name, content, field string
	}{
		{"bad quantity", strings.Replace(configJSON(t, nodectltest.Config(5, "1", "256Mi")), `"256Mi"`, `"lots"`, 1), "resources[memory]"},
		{"not JSON", `{"apiVersion"`, ""},
		{"missing cpu", strings.Replace(configJSON(t, nodectltest.Config(5, "1", "256Mi")), `"cpu": "1",`, ``, 1), "resources[cpu]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(f.ConfigPath, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			serr := reloadErr(t, f.Client)
			if serr.StatusCode != http.StatusBadRequest || serr.Body.Reason != api.ReasonInvalidConfig || serr.Body.Field != tc.field {
				t.Errorf("reload = %v (field %q), want 400 InvalidConfig on %q", serr, serr.Body.Field, tc.field)
			}
			if !errors.Is(serr, client.ErrRejected) {
				t.Errorf("a 400 is not ErrRejected")
			}
			st := mustState(t, f.Client)
			if st.AppliedGeneration != 4 || st.AppliedResources["memory"] != "256Mi" {
				t.Errorf("the applied config changed: %+v", st)
			}
			if st.LastReloadError == nil || st.LastReloadError.Field != tc.field {
				t.Errorf("LastReloadError = %+v, want the reload's error", st.LastReloadError)
			}
			if l, _ := f.Cgroup.Limits(); l.MemoryBytes != 256*mib {
				t.Errorf("cgroup limits changed: %+v", l)
			}
		})
	}

	// A good config clears the error.
	nodectltest.WriteConfig(t, f.ConfigPath, nodectltest.Config(6, "1", "512Mi"))
	st, err := f.Client.Reload(ctx(t))
	if err != nil || st.LastReloadError != nil || st.AppliedGeneration != 6 {
		t.Errorf("reload of a good config = %+v, %v", st, err)
	}
}

func TestShrinkBelowUsageIsRefused(t *testing.T) {
	cfg := nodectltest.Config(1, "1", "256Mi")
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{Config: &cfg})
	f.Cgroup.SetUsage(100 * mib)
	applies := f.Cgroup.Applies()

	nodectltest.WriteConfig(t, f.ConfigPath, nodectltest.Config(2, "1", "64Mi"))
	serr := reloadErr(t, f.Client)
	if serr.StatusCode != http.StatusConflict || serr.Body.Reason != api.ReasonMemoryInUse || serr.Body.Field != "resources[memory]" {
		t.Fatalf("shrink below usage = %v, want 409 MemoryInUse on resources[memory]", serr)
	}
	if !strings.Contains(serr.Body.Message, "104857600 bytes") {
		t.Errorf("message %q does not say how much is in use", serr.Body.Message)
	}
	if f.Cgroup.Applies() != applies {
		t.Errorf("node-ctl tried the kernel although the working set is above the limit")
	}
	st := mustState(t, f.Client)
	if st.AppliedGeneration != 1 || st.AllocatableMemoryBytes != 256*mib || st.AllocatedMemoryBytes != 100*mib {
		t.Errorf("state after the refused shrink = %+v", st)
	}
	if st.LastReloadError == nil || st.LastReloadError.Reason != api.ReasonMemoryInUse {
		t.Errorf("LastReloadError = %+v", st.LastReloadError)
	}

	// Shrinking to exactly the usage, or above it, is fine.
	nodectltest.WriteConfig(t, f.ConfigPath, nodectltest.Config(3, "1", "100Mi"))
	if st, err := f.Client.Reload(ctx(t)); err != nil || st.AppliedGeneration != 3 {
		t.Errorf("shrink to the usage = %+v, %v", st, err)
	}
}

// stubCgroup is a server.Cgroup whose Apply answers from a script, recording the calls.
type stubCgroup struct {
	applyErrs []error // returned by successive Apply calls; nil afterwards
	applied   []cgroup.Limits
	statsErr  error
}

func (s *stubCgroup) Path() string    { return "/stub" }
func (s *stubCgroup) Version() string { return "stub" }
func (s *stubCgroup) Delete() error   { return nil }
func (s *stubCgroup) Stats() (cgroup.Stats, error) {
	return cgroup.Stats{MemoryLimitBytes: 1 << 30}, s.statsErr
}
func (s *stubCgroup) Apply(l cgroup.Limits) error {
	s.applied = append(s.applied, l)
	if len(s.applyErrs) == 0 {
		return nil
	}
	err := s.applyErrs[0]
	s.applyErrs = s.applyErrs[1:]
	return err
}

func newStubServer(t *testing.T, cg server.Cgroup) (*server.Server, string) {
	t.Helper()
	dir := support.ShortTempDir(t)
	srv, err := server.New(server.Options{SocketPath: filepath.Join(dir, "s"), ConfigPath: filepath.Join(dir, "c.json"), Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	return srv, filepath.Join(dir, "c.json")
}

func TestKernelRefusalAndRollback(t *testing.T) {
	stub := &stubCgroup{}
	srv, cfgPath := newStubServer(t, stub)
	nodectltest.WriteConfig(t, cfgPath, nodectltest.Config(1, "1", "1Gi"))
	if _, err := srv.Reload(); err != nil {
		t.Fatalf("first reload: %v", err)
	}
	nodectltest.WriteConfig(t, cfgPath, nodectltest.Config(2, "2", "512Mi"))

	// The kernel refuses the memory limit although the working set looked small (v1:
	// unreclaimable cache): 409, as for the up-front check.
	stub.applyErrs = []error{fmt.Errorf("write memory.limit_in_bytes: %w", cgroup.ErrMemoryInUse)}
	_, err := srv.Reload()
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Reason != api.ReasonMemoryInUse || apiErr.Field != "resources[memory]" {
		t.Fatalf("kernel refusal = %v, want MemoryInUse on resources[memory]", err)
	}

	// Any other failure is a 500, and the old limits are re-applied (the failed Apply may
	// have set memory before failing on cpu).
	stub.applied = nil
	stub.applyErrs = []error{errors.New("write cpu.cfs_quota_us: invalid argument")}
	_, err = srv.Reload()
	if !errors.As(err, &apiErr) || apiErr.Reason != api.ReasonCgroupError || apiErr.Reason.HTTPStatus() != http.StatusInternalServerError {
		t.Fatalf("cgroup failure = %v, want CgroupError", err)
	}
	want := []cgroup.Limits{{CPUMilli: 2000, MemoryBytes: 512 * mib}, {CPUMilli: 1000, MemoryBytes: 1 << 30}}
	if fmt.Sprint(stub.applied) != fmt.Sprint(want) {
		t.Errorf("Apply calls = %v, want the new limits then the old ones %v", stub.applied, want)
	}
	st, err := srv.State()
	if err != nil || st.AppliedGeneration != 1 {
		t.Errorf("state = %+v, %v; want generation 1 still applied", st, err)
	}
}

func TestUnreadableCgroup(t *testing.T) {
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{})
	f.Cgroup.FailStats(errors.New("cgroup gone"))

	_, err := f.Client.Health(ctx(t))
	var serr *client.StatusError
	if !errors.As(err, &serr) || serr.StatusCode != http.StatusServiceUnavailable || serr.Body.Reason != api.ReasonCgroupError {
		t.Errorf("health with an unreadable cgroup = %v, want 503 CgroupError", err)
	}
	if errors.Is(err, client.ErrRejected) || errors.Is(err, client.ErrUnreachable) {
		t.Errorf("an unhealthy answer is neither rejected nor unreachable: %v", err)
	}
	_, err = f.Client.State(ctx(t))
	if !errors.As(err, &serr) || serr.StatusCode != http.StatusInternalServerError {
		t.Errorf("state with an unreadable cgroup = %v, want 500", err)
	}
	f.Cgroup.FailStats(nil)
	if _, err := f.Client.Health(ctx(t)); err != nil {
		t.Errorf("health after recovery: %v", err)
	}
}

// rawClient speaks plain HTTP to a socket, for what the typed client never sends.
func rawClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
}

func TestHTTPErrorsAreJSON(t *testing.T) {
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{})
	c := rawClient(f.SocketPath)
	for _, tc := range []struct {
		method, path string
		status       int
		reason       api.Reason
		allow        string
	}{
		{http.MethodPost, api.PathHealthz, 405, api.ReasonMethodNotAllowed, "GET"},
		{http.MethodDelete, api.PathState, 405, api.ReasonMethodNotAllowed, "GET"},
		{http.MethodGet, api.PathReload, 405, api.ReasonMethodNotAllowed, "POST"},
		{http.MethodGet, "/v2/state", 404, api.ReasonNotFound, ""},
		{http.MethodGet, "/", 404, api.ReasonNotFound, ""},
	} {
		req, _ := http.NewRequestWithContext(ctx(t), tc.method, "http://node-ctl"+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var e api.Error
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &e) != nil || e.Reason != tc.reason || e.Message == "" ||
			resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d %q %s (Allow %q); want %d %s (Allow %q)", tc.method, tc.path,
				resp.StatusCode, resp.Header.Get("Content-Type"), body, resp.Header.Get("Allow"), tc.status, tc.reason, tc.allow)
		}
	}
}

func TestSocket(t *testing.T) {
	t.Run("mode", func(t *testing.T) {
		f := nodectltest.StartFake(t, nodectltest.FakeOptions{})
		fi, err := os.Stat(f.SocketPath)
		if err != nil || fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("socket = %v, %v; want a socket with mode 0660", fi.Mode(), err)
		}
	})

	t.Run("stale socket is replaced, and removed on exit", func(t *testing.T) {
		srv, socket := stubServer(t)
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = ln.Close() // a crashed node-ctl's socket file

		stop := run(t, srv, socket)
		if _, err := client.New(socket).Health(ctx(t)); err != nil {
			t.Fatalf("health over the replaced socket: %v", err)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after a graceful exit: %v", err)
		}
	})

	t.Run("live socket is not taken over", func(t *testing.T) {
		srv, socket := stubServer(t)
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err = srv.Run(ctx(t))
		if err == nil || !strings.Contains(err.Error(), "another process is serving") {
			t.Errorf("Run on a live socket = %v", err)
		}
	})

	t.Run("not a socket", func(t *testing.T) {
		srv, socket := stubServer(t)
		if err := os.WriteFile(socket, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := srv.Run(ctx(t)); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("Run on a regular file = %v", err)
		}
	})
}

// stubServer is a server with a stub cgroup and a socket path in a short directory
// (the directory itself is created by Run).
func stubServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	dir := support.ShortTempDir(t)
	socket := filepath.Join(dir, "run", "s.sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{SocketPath: socket, ConfigPath: filepath.Join(dir, "c.json"), Cgroup: &stubCgroup{}})
	if err != nil {
		t.Fatal(err)
	}
	return srv, socket
}

// run runs srv until the returned stop is called, after waiting until it serves on socket.
func run(t *testing.T, srv *server.Server, socket string) (stop func() error) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(c) }()
	err := nodectltest.Poll(10*time.Second, func() error {
		select {
		case err := <-done:
			return nodectltest.Permanent(fmt.Errorf("Run returned early: %w", err))
		default:
		}
		_, err := client.New(socket).Health(ctx(t))
		return err
	})
	if err != nil {
		cancel()
		t.Fatalf("server did not come up: %v", err)
	}
	return func() error {
		cancel()
		return <-done
	}
}

func TestDeleteCgroupOnExit(t *testing.T) {
	for _, deleteOnExit := range []bool{false, true} {
		f := nodectltest.StartFake(t, nodectltest.FakeOptions{DeleteCgroupOnExit: deleteOnExit})
		if err := f.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if f.Cgroup.Deleted() != deleteOnExit {
			t.Errorf("DeleteCgroupOnExit=%v: cgroup deleted = %v", deleteOnExit, f.Cgroup.Deleted())
		}
	}
}

func TestNewRequiresOptions(t *testing.T) {
	for _, opts := range []server.Options{
		{ConfigPath: "c", Cgroup: &stubCgroup{}},
		{SocketPath: "s", Cgroup: &stubCgroup{}},
		{SocketPath: "s", ConfigPath: "c"},
	} {
		if _, err := server.New(opts); err == nil {
			t.Errorf("New(%+v) succeeded", opts)
		}
	}
}

func configJSON(t *testing.T, cfg api.Config) string {
	t.Helper()
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestConcurrentReloadsAndReads hammers the server from several clients (run with -race):
// every answer is a consistent state, and the last reload wins.
func TestConcurrentReloadsAndReads(t *testing.T) {
	cfg := nodectltest.Config(1, "1", "1Gi")
	f := nodectltest.StartFake(t, nodectltest.FakeOptions{Config: &cfg})
	errs := make(chan error, 40)
	for i := range 20 {
		go func() {
			if i%2 == 0 {
				_, err := f.Client.Reload(ctx(t))
				errs <- err
				return
			}
			st, err := f.Client.State(ctx(t))
			if err == nil && (st.AppliedGeneration != 1 || st.AppliedResources["memory"] != "1Gi") {
				err = fmt.Errorf("inconsistent state %+v", st)
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	nodectltest.WriteConfig(t, f.ConfigPath, nodectltest.Config(2, "2", "2Gi"))
	if st, err := f.Client.Reload(ctx(t)); err != nil || st.AppliedGeneration != 2 {
		t.Errorf("final reload = %+v, %v", st, err)
	}
}
