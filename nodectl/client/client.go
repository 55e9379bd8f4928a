// Package client is the placeholder-agent's side of the node-ctl contract: an HTTP client
// for node-ctl's unix socket and WriteConfig, which writes the config file atomically.
//
// Errors say what the caller has to do differently:
//   - errors.Is(err, ErrUnreachable): no answer at all (no socket, connection refused,
//     timeout). node-ctl is down or restarting; NodeCtlHealthy is False.
//   - errors.Is(err, ErrRejected): node-ctl answered and refused the request or the
//     config (4xx). errors.As(err, &*StatusError) gives the reason and the field; the
//     previously applied config is still in force.
//   - any other error: node-ctl answered with a server error (5xx, also a *StatusError)
//     or something that is not the contract.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

var (
	// ErrUnreachable wraps every failure to get an answer from node-ctl.
	ErrUnreachable = errors.New("node-ctl unreachable")
	// ErrRejected matches a *StatusError with a 4xx status: node-ctl refused the request,
	// for a reload the config.
	ErrRejected = errors.New("node-ctl rejected the request")
)

// DefaultTimeout bounds one request when the context has no earlier deadline. A reload
// writes a few cgroup files; v1 may spend a moment reclaiming before it refuses.
const DefaultTimeout = 10 * time.Second

// maxBody bounds the answer read from node-ctl.
const maxBody = 1 << 20

// StatusError is an error answer of node-ctl.
type StatusError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Body is the contract's error body.
	Body api.Error
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("node-ctl answered %d %s: %s", e.StatusCode, e.Body.Reason, e.Body.Error())
}

// Is makes errors.Is(err, ErrRejected) true for 4xx answers.
func (e *StatusError) Is(target error) bool {
	return target == ErrRejected && e.StatusCode >= 400 && e.StatusCode < 500
}

// Client talks to one node-ctl. It is safe for concurrent use.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client for the node-ctl listening on socketPath. No connection is made
// until a request.
func New(socketPath string) *Client {
	dialer := &net.Dialer{}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socketPath)
		},
		// node-ctl restarts under us; a pooled connection to the old process is useless.
		DisableKeepAlives: true,
	}
	return &Client{socket: socketPath, http: &http.Client{Transport: transport, Timeout: DefaultTimeout}}
}

// SocketPath is the socket the client talks to.
func (c *Client) SocketPath() string { return c.socket }

// Health asks whether node-ctl is healthy. An unhealthy node-ctl answers 503: a
// *StatusError that is not ErrRejected.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.do(ctx, http.MethodGet, api.PathHealthz, &h, &h.APIVersion); err != nil {
		return nil, fmt.Errorf("node-ctl health: %w", err)
	}
	if h.Status != api.HealthOK {
		return nil, fmt.Errorf("node-ctl health: status %q", h.Status)
	}
	return &h, nil
}

// State returns node-ctl's state.
func (c *Client) State(ctx context.Context) (*api.State, error) {
	var st api.State
	if err := c.do(ctx, http.MethodGet, api.PathState, &st, &st.APIVersion); err != nil {
		return nil, fmt.Errorf("node-ctl state: %w", err)
	}
	return &st, nil
}

// Reload makes node-ctl re-read and apply its config file and returns the state after the
// reload. A refused config is ErrRejected (the *StatusError names the reason and field).
func (c *Client) Reload(ctx context.Context) (*api.State, error) {
	var st api.State
	if err := c.do(ctx, http.MethodPost, api.PathReload, &st, &st.APIVersion); err != nil {
		return nil, fmt.Errorf("node-ctl reload: %w", err)
	}
	return &st, nil
}

// do sends one request and decodes a 200 answer into out, whose apiVersion field is
// version; any other status becomes a *StatusError.
func (c *Client) do(ctx context.Context, method, path string, out any, version *string) error {
	// The host is a placeholder: the transport always dials the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://node-ctl"+path, http.NoBody)
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w at %s: reading the answer: %w", ErrUnreachable, c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		serr := &StatusError{StatusCode: resp.StatusCode}
		if err := json.Unmarshal(data, &serr.Body); err != nil || serr.Body.Message == "" {
			serr.Body = api.Error{Message: fmt.Sprintf("non-contract error body %q", truncate(data))}
		}
		return serr
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	if *version != api.APIVersion {
		return fmt.Errorf("answer has apiVersion %q, this client speaks %q", *version, api.APIVersion)
	}
	return nil
}

func truncate(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
