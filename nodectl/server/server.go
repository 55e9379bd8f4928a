// Package server is the reference node-ctl: it serves the node-ctl contract
// (docs/node-ctl-contract.md, package api) on a unix socket and enforces the pool's cpu and
// memory on a node-level cgroup.
//
// The config file is the only input: node-ctl applies it when it starts (if present) and on
// every reload (POST /v1/reload, or SIGHUP wired by the caller). A config that is invalid or
// that the kernel refuses leaves the last applied config in force and is reported in the
// reload's answer and in State.LastReloadError.
package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
)

// Cgroup is the node-level cgroup the pool is enforced in. *cgroup.Manager implements it;
// tests use an in-memory fake (nodectltest.FakeCgroup).
type Cgroup interface {
	// Path is the cgroup's path, reported in State.
	Path() string
	// Version is "v1" or "v2", reported in State.
	Version() string
	// Apply sets the limits. It returns an error wrapping cgroup.ErrMemoryInUse when the
	// memory limit is below what the cgroup uses, and then changes nothing.
	Apply(cgroup.Limits) error
	// Stats reads the memory figures.
	Stats() (cgroup.Stats, error)
	// Delete removes the cgroup; it fails while processes are in it.
	Delete() error
}

var _ Cgroup = (*cgroup.Manager)(nil)

// Timeouts of the HTTP server and of its graceful shutdown.
const (
	readHeaderTimeout = 5 * time.Second
	shutdownTimeout   = 5 * time.Second
	// socketMode lets root and the socket's group connect.
	socketMode fs.FileMode = 0o660
)

// Options configure a Server.
type Options struct {
	// SocketPath is the unix socket to listen on (api.DefaultSocketPath).
	SocketPath string
	// ConfigPath is the config file to apply (api.DefaultConfigPath).
	ConfigPath string
	// Zone is reported in State.Zone.
	Zone string
	// Cgroup is where the pool is enforced. Required.
	Cgroup Cgroup
	// DeleteCgroupOnExit deletes the cgroup when Run returns, if no process is left in it.
	// Off by default: a restart (the reload fallback) must keep the cgroup and the
	// sandboxes in it.
	DeleteCgroupOnExit bool
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// Server is the reference node-ctl.
type Server struct {
	opts      Options
	log       *slog.Logger
	startedAt time.Time

	// mu serialises reloads and guards the fields below it.
	mu             sync.Mutex
	applied        *api.Config // last successfully applied config; nil before the first
	appliedAt      time.Time
	lastReloadTime time.Time  // zero before the first reload
	lastReloadErr  *api.Error // nil when the last reload succeeded
}

// New checks opts and returns a Server. It does not touch the cgroup or the socket.
func New(opts Options) (*Server, error) {
	switch {
	case opts.SocketPath == "":
		return nil, errors.New("socket path is required")
	case opts.ConfigPath == "":
		return nil, errors.New("config path is required")
	case opts.Cgroup == nil:
		return nil, errors.New("cgroup is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, startedAt: time.Now()}, nil
}

// Run applies the config file if it exists, serves the API on the socket until ctx is
// done, then shuts down gracefully. A config that fails to apply at start is logged and
// reported in State; node-ctl keeps running so the agent can see why and write a better
// one.
func (s *Server) Run(ctx context.Context) error {
	// Claim the socket first, so that a second node-ctl never touches the cgroup; apply
	// next, so that the first answer (clients wait in the backlog meanwhile) is after it.
	ln, err := listen(s.opts.SocketPath)
	if err != nil {
		return err
	}
	_, _ = s.Reload() // logs its outcome; a failure leaves nothing applied, reported in State
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	s.log.Info("node-ctl serving", "socket", s.opts.SocketPath, "config", s.opts.ConfigPath,
		"cgroup", s.opts.Cgroup.Path(), "cgroupVersion", s.opts.Cgroup.Version(), "zone", s.opts.Zone)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving on %s: %w", s.opts.SocketPath, err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx) // closes the listener, which unlinks the socket
	if err != nil {
		err = fmt.Errorf("shutting down the API server: %w", err)
	}
	if s.opts.DeleteCgroupOnExit {
		if derr := s.opts.Cgroup.Delete(); derr != nil {
			s.log.Warn("keeping the cgroup", "cgroup", s.opts.Cgroup.Path(), "err", derr)
		} else {
			s.log.Info("deleted the cgroup", "cgroup", s.opts.Cgroup.Path())
		}
	}
	return err
}

// listen creates the socket's directory and listens on the socket, replacing a stale
// socket file left by a process that died but refusing to take over a live one.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if conn, err := net.Dial("unix", path); err == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("another process is serving on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("restricting the socket's mode: %w", err)
	}
	return ln, nil
}

// Reload reads the config file and applies it. On success it returns the new State. On
// failure it returns an *api.Error and the previously applied config stays in force.
func (s *Server) Reload() (*api.State, error) {
	s.mu.Lock()
	apiErr := s.reloadLocked()
	s.lastReloadTime = time.Now()
	s.lastReloadErr = apiErr
	applied := s.applied != nil
	s.mu.Unlock()
	if apiErr != nil {
		level := slog.LevelWarn
		if apiErr.Reason == api.ReasonConfigNotFound {
			level = slog.LevelInfo // a fresh node: the agent has not written the config yet
		}
		s.log.Log(context.Background(), level, "reload failed", "reason", apiErr.Reason,
			"field", apiErr.Field, "err", apiErr.Message, "keepingAppliedConfig", applied)
		return nil, apiErr
	}
	return s.State()
}

// reloadLocked does the work of Reload with s.mu held.
func (s *Server) reloadLocked() *api.Error {
	data, err := os.ReadFile(s.opts.ConfigPath)
	if errors.Is(err, fs.ErrNotExist) {
		return &api.Error{Reason: api.ReasonConfigNotFound,
			Message: fmt.Sprintf("config file %s does not exist", s.opts.ConfigPath)}
	}
	if err != nil {
		return &api.Error{Reason: api.ReasonInvalidConfig, Message: fmt.Sprintf("reading the config: %v", err)}
	}
	cfg, err := api.ParseConfig(data)
	if err != nil {
		apiErr := &api.Error{Reason: api.ReasonInvalidConfig, Message: err.Error()}
		if invalid, ok := errors.AsType[*api.InvalidConfigError](err); ok {
			apiErr.Field = invalid.Field()
		}
		return apiErr
	}
	limits := cgroup.Limits{CPUMilli: cfg.CPUMilli(), MemoryBytes: cfg.MemoryBytes()}
	memoryField := field.NewPath("resources").Key(api.ResourceMemory).String()

	// Refuse a memory limit below the working set up front: cgroup v1 would answer EBUSY
	// after trying to reclaim, cgroup v2 would OOM-kill sandboxes.
	stats, err := s.opts.Cgroup.Stats()
	if err != nil {
		return &api.Error{Reason: api.ReasonCgroupError, Message: err.Error()}
	}
	if stats.MemoryWorkingSetBytes > limits.MemoryBytes {
		return &api.Error{Reason: api.ReasonMemoryInUse, Field: memoryField, Message: fmt.Sprintf(
			"memory limit %s (%d bytes) is below the %d bytes the sandboxes use now",
			cfg.Resources[api.ResourceMemory], limits.MemoryBytes, stats.MemoryWorkingSetBytes)}
	}

	if err := s.opts.Cgroup.Apply(limits); err != nil {
		s.rollbackLocked()
		if errors.Is(err, cgroup.ErrMemoryInUse) {
			return &api.Error{Reason: api.ReasonMemoryInUse, Field: memoryField, Message: err.Error()}
		}
		return &api.Error{Reason: api.ReasonCgroupError, Message: err.Error()}
	}
	s.applied, s.appliedAt = cfg, time.Now()
	s.log.Info("applied config", "pool", cfg.Pool.Name, "poolUID", cfg.Pool.UID,
		"generation", cfg.Generation, "cpuMilli", limits.CPUMilli, "memoryBytes", limits.MemoryBytes)
	return nil
}

// rollbackLocked re-applies the last applied limits after a failed Apply, which may have
// changed part of them (memory applied, cpu failed).
func (s *Server) rollbackLocked() {
	if s.applied == nil {
		return
	}
	old := cgroup.Limits{CPUMilli: s.applied.CPUMilli(), MemoryBytes: s.applied.MemoryBytes()}
	if err := s.opts.Cgroup.Apply(old); err != nil {
		s.log.Error("restoring the applied limits failed; the cgroup may hold a mix",
			"generation", s.applied.Generation, "err", err)
	}
}

// State reports the applied config and the cgroup's memory figures.
func (s *Server) State() (*api.State, error) {
	s.mu.Lock()
	st := &api.State{
		APIVersion:      api.APIVersion,
		Zone:            s.opts.Zone,
		StartedAt:       s.startedAt,
		PID:             os.Getpid(),
		CgroupPath:      s.opts.Cgroup.Path(),
		CgroupVersion:   s.opts.Cgroup.Version(),
		LastReloadError: s.lastReloadErr,
	}
	if !s.lastReloadTime.IsZero() {
		t := s.lastReloadTime
		st.LastReloadTime = &t
	}
	if s.applied != nil {
		at := s.appliedAt
		st.Pool, st.AppliedGeneration, st.AppliedAt = s.applied.Pool, s.applied.Generation, &at
		st.AppliedResources = maps.Clone(s.applied.Resources)
	}
	s.mu.Unlock()

	stats, err := s.opts.Cgroup.Stats()
	if err != nil {
		return nil, &api.Error{Reason: api.ReasonCgroupError, Message: err.Error()}
	}
	st.AllocatableMemoryBytes = stats.MemoryLimitBytes
	st.AllocatedMemoryBytes = stats.MemoryWorkingSetBytes
	st.MemoryUsageBytes = stats.MemoryUsageBytes
	return st, nil
}

// Health reports whether node-ctl can read its cgroup.
func (s *Server) Health() (*api.Health, error) {
	if _, err := s.opts.Cgroup.Stats(); err != nil {
		return nil, &api.Error{Reason: api.ReasonCgroupError, Message: err.Error()}
	}
	return &api.Health{APIVersion: api.APIVersion, Status: api.HealthOK}, nil
}
