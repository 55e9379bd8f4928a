package hollow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Paths of the control endpoint (Options.ControlAddr), for a benchmark that runs the hollow
// nodes as their own process.
const (
	// ReadyzPath answers 200 once every hollow node has started, 503 before.
	ReadyzPath = "/readyz"
	// StopPath (POST, ?nodes=a,b) stops nodes as lost machines stop (Nodes.StopNode).
	StopPath = "/nodes/stop"
	// StartPath (POST, ?nodes=a,b) starts stopped nodes again (Nodes.StartNode).
	StartPath = "/nodes/start"
)

// control serves the control endpoint.
type control struct {
	mu    sync.Mutex // guards nodes
	nodes *Nodes
}

func newControl() *control { return &control{} }

func (c *control) ready(n *Nodes) {
	c.mu.Lock()
	c.nodes = n
	c.mu.Unlock()
}

func (c *control) running() *Nodes {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes
}

// serve listens on addr and serves until ctx ends.
func (c *control) serve(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the control endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		if c.running() == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	act := func(do func(n *Nodes, node string) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			n := c.running()
			if r.Method != http.MethodPost || n == nil {
				http.Error(w, "POST, once the nodes run", http.StatusBadRequest)
				return
			}
			var errs []error
			for node := range strings.SplitSeq(r.URL.Query().Get("nodes"), ",") {
				if node != "" {
					errs = append(errs, do(n, node))
				}
			}
			if err := errors.Join(errs...); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}
	}
	mux.Handle(StopPath, act(func(n *Nodes, node string) error { n.StopNode(node); return nil }))
	mux.Handle(StartPath, act(func(n *Nodes, node string) error { return n.StartNode(node) }))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf.FromContext(ctx).Error(err, "the control endpoint")
		}
	}()
	return nil
}
