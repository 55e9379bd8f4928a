// Package agentclient is the placeholder shim's connection to the placeholder agent
// (agent/shimapi): one lazily dialled TTRPC connection per shim, redialled when the agent
// restarts.
//
// Create and Start must reach the agent: they retry with a short, bounded backoff while the
// agent is unreachable and then fail with an error that names the agent's address, so
// containerd fails the request and kubelet retries it — never a silent success. Delete and
// Shutdown are notifications: one bounded attempt, and the caller only logs a failure,
// because containerd's clean-up must not wait for the agent.
package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
)

// TimeoutEnv is the environment variable that overrides DefaultTimeout (a Go duration such
// as "5s"). Like shimapi.AddressEnv, containerd passes it to the shim (deploy/containerd).
const TimeoutEnv = "SANDBOXPOOL_AGENT_TIMEOUT"

const (
	// DefaultTimeout bounds the retries of Create and Start while the agent is unreachable.
	// It stays well below kubelet's CRI timeout (2 min) and containerd's, so the failure
	// reaches kubelet as the agent's, not as a timeout.
	DefaultTimeout = 5 * time.Second
	// DefaultCallTimeout bounds the wait for the answer to one Create or Start the agent
	// received: it may be aligning node-ctl with the pool before it answers.
	DefaultCallTimeout = 30 * time.Second
	// NotifyTimeout bounds the single attempt of Delete and Shutdown.
	NotifyTimeout = time.Second

	firstBackoff = 50 * time.Millisecond
	maxBackoff   = time.Second
)

// Config says where the agent is and how long to try.
type Config struct {
	// Address of the agent's socket: a path or a unix:// URL.
	Address string
	// Timeout bounds the retries of Create and Start while the agent is unreachable.
	Timeout time.Duration
	// CallTimeout bounds the wait for one answer; DefaultCallTimeout when zero.
	CallTimeout time.Duration
}

// ConfigFromEnv reads the configuration from the shim's environment (set by containerd),
// with the defaults for what is not set.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Address: shimapi.DefaultAddress, Timeout: DefaultTimeout}
	if a := os.Getenv(shimapi.AddressEnv); a != "" {
		cfg.Address = a
	}
	if _, err := shimapi.SocketPath(cfg.Address); err != nil {
		return Config{}, fmt.Errorf("%s: %w", shimapi.AddressEnv, err)
	}
	if t := os.Getenv(TimeoutEnv); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want a positive Go duration such as 5s", TimeoutEnv, t)
		}
		cfg.Timeout = d
	}
	return cfg, nil
}

// Client forwards the shim's task events to the agent.
type Client struct {
	cfg Config

	mu   sync.Mutex      // guards conn
	conn *shimapi.Client // nil until dialled, and again after the agent went away
}

// New returns a client; it connects on first use.
func New(cfg Config) *Client {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	return &Client{cfg: cfg}
}

// Address is the agent's address, for messages.
func (c *Client) Address() string { return c.cfg.Address }

// Create tells the agent about a new task, retrying while the agent is unreachable.
func (c *Client) Create(ctx context.Context, req *v1.CreateRequest) error {
	return c.retry(ctx, "Create", req.GetIdentity(), func(ctx context.Context, s shimapi.Service) error {
		_, err := s.Create(ctx, req)
		return err
	})
}

// Start tells the agent a task is running, retrying while the agent is unreachable.
func (c *Client) Start(ctx context.Context, req *v1.StartRequest) error {
	return c.retry(ctx, "Start", req.GetIdentity(), func(ctx context.Context, s shimapi.Service) error {
		_, err := s.Start(ctx, req)
		return err
	})
}

// Delete tells the agent a task was deleted: one bounded attempt.
func (c *Client) Delete(ctx context.Context, req *v1.DeleteRequest) error {
	return c.notify(ctx, func(ctx context.Context, s shimapi.Service) error {
		_, err := s.Delete(ctx, req)
		return err
	})
}

// Shutdown tells the agent the shim is going away: one bounded attempt.
func (c *Client) Shutdown(ctx context.Context, req *v1.ShutdownRequest) error {
	return c.notify(ctx, func(ctx context.Context, s shimapi.Service) error {
		_, err := s.Shutdown(ctx, req)
		return err
	})
}

// Announce keeps the agent told that a started task runs, until ctx ends: whenever the
// connection to the agent closes (the agent restarted), it dials again, with a backoff while
// the agent is not there, and repeats req. A restarted agent knows nothing of the pods that
// were started before it; this is how it learns of them, and of the shim's PID, which it
// watches. req has already been delivered once when Announce is called.
func (c *Client) Announce(ctx context.Context, req *v1.StartRequest) {
	delivered := true
	backoff := firstBackoff
	for ctx.Err() == nil {
		conn, err := c.connection(ctx)
		if err == nil && !delivered {
			err = c.once(ctx, func(ctx context.Context, s shimapi.Service) error {
				_, err := s.Start(ctx, req)
				return err
			})
			delivered = err == nil
		}
		if err == nil {
			backoff = firstBackoff
			if conn.WaitClosed(ctx) != nil && ctx.Err() != nil {
				return
			}
			c.drop(conn)
			delivered = false
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Close closes the connection, if any.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

type call func(context.Context, shimapi.Service) error

// retry runs fn until it succeeds, the agent answers otherwise, or c.cfg.Timeout has
// passed with the agent unreachable. An agent that took the call gets c.cfg.CallTimeout
// to answer it.
func (c *Client) retry(ctx context.Context, method string, id *v1.Identity, fn call) error {
	giveUp := time.Now().Add(c.cfg.Timeout)
	backoff := firstBackoff
	for {
		callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		err := c.once(callCtx, fn)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%s of %s to the placeholder agent at %s: %w", method, id.GetContainerId(), c.cfg.Address, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("placeholder agent at %s did not answer %s of %s within %s; kubelet will retry: %w",
				c.cfg.Address, method, id.GetContainerId(), c.cfg.CallTimeout, errdefs.ErrUnavailable)
		case !unreachable(err):
			return fmt.Errorf("placeholder agent at %s refused %s of %s: %w", c.cfg.Address, method, id.GetContainerId(), err)
		}
		wait := min(backoff, time.Until(giveUp))
		if wait <= 0 {
			return fmt.Errorf("placeholder agent at %s unreachable for %s, %s of %s not delivered (last error: %v); "+
				"kubelet will retry: %w", c.cfg.Address, c.cfg.Timeout, method, id.GetContainerId(), err, errdefs.ErrUnavailable)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s of %s to the placeholder agent at %s: %w", method, id.GetContainerId(), c.cfg.Address, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// notify runs fn once, redialling once if the connection turned out to be stale.
func (c *Client) notify(ctx context.Context, fn call) error {
	ctx, cancel := context.WithTimeout(ctx, NotifyTimeout)
	defer cancel()
	err := c.once(ctx, fn)
	if err != nil && errors.Is(err, ttrpc.ErrClosed) {
		err = c.once(ctx, fn)
	}
	if err != nil {
		return fmt.Errorf("placeholder agent at %s: %w", c.cfg.Address, err)
	}
	return nil
}

// once makes one call on the current connection, dialling first if there is none. A
// connection that failed is dropped so the next call redials. Answers of the agent come
// back as errdefs errors.
func (c *Client) once(ctx context.Context, fn call) error {
	conn, err := c.connection(ctx)
	if err != nil {
		return err
	}
	switch err = fn(ctx, conn); {
	case err == nil:
		return nil
	case connectionBroken(err):
		c.drop(conn)
		return err
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return err
	default:
		return errgrpc.ToNative(err)
	}
}

func (c *Client) connection(ctx context.Context) (*shimapi.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := shimapi.Dial(ctx, c.cfg.Address)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

func (c *Client) drop(conn *shimapi.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// connectionBroken reports errors of the connection rather than answers of the agent.
func connectionBroken(err error) bool {
	return errors.Is(err, ttrpc.ErrClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// unreachable reports errors worth retrying: no agent listening, a broken connection, or
// the agent saying it is not ready yet.
func unreachable(err error) bool {
	return connectionBroken(err) ||
		errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) ||
		errdefs.IsUnavailable(err)
}
