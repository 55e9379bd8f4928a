package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/nodectl/server"
	"github.com/agentcube/sandboxpool/tests/support"
)

func ctx(t *testing.T) context.Context {
	return support.Context(t, 10*time.Second)
}

// serveUnix serves h with httptest on a unix socket and returns the socket's path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	socket := filepath.Join(support.ShortTempDir(t), "s.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return socket
}

func TestAgainstTheReferenceHandler(t *testing.T) {
	// The reference server's handler behind httptest, with the in-memory cgroup.
	dir := support.ShortTempDir(t)
	cfgPath := filepath.Join(dir, "node-ctl.json")
	fake := nodectltest.NewFakeCgroup("/pool")
	srv, err := server.New(server.Options{SocketPath: "unused", ConfigPath: cfgPath, Zone: "z", Cgroup: fake})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(serveUnix(t, srv.Handler()))

	h, err := c.Health(ctx(t))
	if err != nil || h.Status != api.HealthOK {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	nodectltest.WriteConfig(t, cfgPath, nodectltest.Config(7, "250m", "32Mi"))
	st, err := c.Reload(ctx(t))
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if st.AppliedGeneration != 7 || st.AllocatableMemoryBytes != 32<<20 || st.Zone != "z" {
		t.Errorf("Reload state = %+v", st)
	}
	fake.SetUsage(20 << 20)
	st, err = c.State(ctx(t))
	if err != nil || st.AllocatedMemoryBytes != 20<<20 {
		t.Errorf("State = %+v, %v; want 20 MiB allocated", st, err)
	}

	// A refused config: ErrRejected, with reason and field, not unreachable.
	nodectltest.WriteConfig(t, cfgPath, nodectltest.Config(8, "250m", "16Mi"))
	_, err = c.Reload(ctx(t))
	var serr *client.StatusError
	if !errors.Is(err, client.ErrRejected) || errors.Is(err, client.ErrUnreachable) || !errors.As(err, &serr) {
		t.Fatalf("Reload of a too-small config = %v, want ErrRejected with a *StatusError", err)
	}
	if serr.StatusCode != http.StatusConflict || serr.Body.Reason != api.ReasonMemoryInUse || serr.Body.Field != "resources[memory]" {
		t.Errorf("StatusError = %+v", serr)
	}
	if !strings.HasPrefix(err.Error(), "node-ctl reload: node-ctl answered 409 MemoryInUse: resources[memory]: ") {
		t.Errorf("error text = %q", err)
	}
}

func TestUnreachable(t *testing.T) {
	dir := support.ShortTempDir(t)

	t.Run("no socket", func(t *testing.T) {
		c := client.New(filepath.Join(dir, "missing.sock"))
		for name, call := range map[string]func() error{
			"health": func() error { _, err := c.Health(ctx(t)); return err },
			"state":  func() error { _, err := c.State(ctx(t)); return err },
			"reload": func() error { _, err := c.Reload(ctx(t)); return err },
		} {
			err := call()
			if !errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrRejected) {
				t.Errorf("%s = %v, want ErrUnreachable only", name, err)
			}
			if !errors.Is(err, syscall.ENOENT) {
				t.Errorf("%s = %v, want the cause (ENOENT) wrapped", name, err)
			}
		}
	})

	t.Run("stale socket", func(t *testing.T) {
		socket := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = ln.Close()
		_, err = client.New(socket).State(ctx(t))
		if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("State on a stale socket = %v, want ErrUnreachable wrapping ECONNREFUSED", err)
		}
	})

	t.Run("stopped node-ctl", func(t *testing.T) {
		f := nodectltest.StartFake(t, nodectltest.FakeOptions{})
		if _, err := f.Client.Health(ctx(t)); err != nil {
			t.Fatalf("Health while running: %v", err)
		}
		if err := f.Stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Client.Health(ctx(t)); !errors.Is(err, client.ErrUnreachable) {
			t.Errorf("Health after stop = %v, want ErrUnreachable", err)
		}
	})

	t.Run("hung node-ctl", func(t *testing.T) {
		release := make(chan struct{})
		socket := serveUnix(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		defer close(release)
		c, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := client.New(socket).State(c)
		if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("State on a hung peer = %v, want ErrUnreachable wrapping the deadline", err)
		}
	})
}

func TestNonContractAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
		reject bool
	}{
		{"server error with a contract body", 500, `{"error":"disk on fire","reason":"CgroupError"}`, "500 CgroupError: disk on fire", false},
		{"server error with HTML", 502, `<html>bad gateway</html>`, `non-contract error body "<html>bad gateway</html>"`, false},
		{"client error without a body", 400, ``, `non-contract error body ""`, true},
		{"wrong apiVersion", 200, `{"apiVersion":"nodectl.sandbox-pool.io/v2"}`, `apiVersion "nodectl.sandbox-pool.io/v2"`, false},
		{"garbage", 200, `{"apiVersion":`, "decoding the answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			_, err := client.New(socket).State(ctx(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("State = %v, want an error saying %q", err, tc.want)
			}
			if errors.Is(err, client.ErrRejected) != tc.reject || errors.Is(err, client.ErrUnreachable) {
				t.Errorf("State = %v: ErrRejected %v (want %v), ErrUnreachable %v (want false)", err,
					errors.Is(err, client.ErrRejected), tc.reject, errors.Is(err, client.ErrUnreachable))
			}
		})
	}
}
