// Package shimapi is the agent side of the placeholder shim's API: the PlaceholderShim
// TTRPC service defined in v1/shimapi.proto, served by the placeholder agent on a local
// unix socket and called by containerd-shim-placeholder-v2 (docs/design.md §3.5, §3.6).
//
// The agent implements Service and serves it with Listen and Register; shimapitest has a
// recording double for tests. docs/shim.md describes what each call means.
package shimapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/ttrpc"

	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
)

const (
	// AddressEnv is the environment variable that tells the shim where the agent serves
	// the API: a socket path, optionally as a unix:// URL. containerd passes it to every
	// shim ([plugins.'io.containerd.shim.v1.manager'] env, see deploy/containerd).
	AddressEnv = "SANDBOXPOOL_AGENT_ADDRESS"
	// DefaultAddress is the agent's socket when AddressEnv is not set.
	DefaultAddress = "/run/sandbox-pool/agent.sock"
)

// Service is what the agent implements.
type Service = v1.PlaceholderShimService

// Register registers svc on server.
func Register(server *ttrpc.Server, svc Service) {
	v1.RegisterPlaceholderShimService(server, svc)
}

// SocketPath returns the file system path of address: a path, or a unix:// URL.
func SocketPath(address string) (string, error) {
	if rest, ok := strings.CutPrefix(address, "unix://"); ok {
		address = rest
	} else if strings.Contains(address, "://") {
		return "", fmt.Errorf("agent address %q: only unix sockets are supported", address)
	}
	if address == "" {
		return "", errors.New("agent address is empty")
	}
	return address, nil
}

// Listen listens on the unix socket of address, creating its directory and replacing a
// stale socket left by an earlier run. Only the owner may connect (the shims run as root).
func Listen(address string) (net.Listener, error) {
	path, err := SocketPath(address)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the agent socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale agent socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restricting %s: %w", path, err)
	}
	return l, nil
}

// Client is a connection to the agent.
type Client struct {
	v1.PlaceholderShimService
	conn *ttrpc.Client
}

// Dial connects to the agent at address.
func Dial(ctx context.Context, address string) (*Client, error) {
	path, err := SocketPath(address)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	conn := ttrpc.NewClient(c)
	return &Client{PlaceholderShimService: v1.NewPlaceholderShimClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// WaitClosed blocks until the connection is closed (the agent went away, or Close) or ctx
// ends.
func (c *Client) WaitClosed(ctx context.Context) error { return c.conn.UserOnCloseWait(ctx) }
