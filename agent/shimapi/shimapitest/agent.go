// Package shimapitest is a recording double of the placeholder agent for tests of the
// placeholder shim: a real TTRPC server of the PlaceholderShim service on a unix socket
// that records every call, keeps the view of the tasks an agent would build from them, and
// can be told to fail calls or to go away. The real agent replaces it in end-to-end tests.
package shimapitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/tests/support"
)

// Methods of the PlaceholderShim service, as recorded in Call.Method.
const (
	MethodCreate   = "Create"
	MethodStart    = "Start"
	MethodDelete   = "Delete"
	MethodShutdown = "Shutdown"
)

// Call is one request the double received.
type Call struct {
	Method   string
	Identity *v1.Identity
	Request  proto.Message
	// Err is the error the double answered with, nil for success.
	Err error
	At  time.Time
}

// Task is the double's view of one task, built from the calls the way an agent would:
// Create records it, Start marks it started, Delete and Shutdown forget it. Nothing else
// changes it: a shim that dies unannounced leaves it as it was.
type Task struct {
	Identity *v1.Identity
	Started  bool
	// Creates counts the Create calls for the task's container ID, over its whole life:
	// a second Create is the shim re-aligning the agent.
	Creates int
}

// Agent is the double. Its zero value is not usable; call Start.
type Agent struct {
	address string

	mu       sync.Mutex // guards everything below
	server   *ttrpc.Server
	listener net.Listener // closing it removes the socket file
	calls    []Call
	tasks    map[string]*Task // by container ID
	creates  map[string]int   // by container ID, never reset
	failures map[string][]error
	holds    map[string]chan struct{} // by method: closed on release
	changed  chan struct{}            // closed and replaced on every call
	serveErr error
}

var _ shimapi.Service = (*service)(nil)

// Start serves the double at address (a socket path); Close stops it.
func Start(address string) (*Agent, error) {
	a := &Agent{
		address:  address,
		tasks:    map[string]*Task{},
		creates:  map[string]int{},
		failures: map[string][]error{},
		holds:    map[string]chan struct{}{},
		changed:  make(chan struct{}),
	}
	if err := a.Up(); err != nil {
		return nil, err
	}
	return a, nil
}

// StartTest serves the double on a socket in a short temporary directory for t; t's
// cleanup closes it and reports an error closing it.
func StartTest(t testing.TB) *Agent {
	t.Helper()
	a, err := Start(filepath.Join(support.ShortTempDir(t), "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// Address is where the double serves.
func (a *Agent) Address() string { return a.address }

// Up serves again after Down (Start calls it).
func (a *Agent) Up() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server != nil {
		return errors.New("shimapitest: already serving")
	}
	l, err := shimapi.Listen(a.address)
	if err != nil {
		return err
	}
	server, err := ttrpc.NewServer()
	if err != nil {
		_ = l.Close()
		return err
	}
	shimapi.Register(server, &service{a})
	a.server, a.listener = server, l
	go func() {
		err := server.Serve(context.Background(), l)
		if err != nil && !errors.Is(err, ttrpc.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			a.mu.Lock()
			a.serveErr = fmt.Errorf("shimapitest: serving %s: %w", a.address, err)
			a.mu.Unlock()
		}
	}()
	return nil
}

// Down stops serving and closes every connection, as an agent that stopped: the socket
// is gone and shims cannot connect until Up.
func (a *Agent) Down() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server == nil {
		return nil
	}
	// Close the listener here, not only through the server: Serve may not have taken it
	// yet, and closing it late would remove the socket of the next Up.
	err := errors.Join(ignoreClosed(a.listener.Close()), ignoreClosed(a.server.Close()))
	a.server, a.listener = nil, nil
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close stops the double; it returns an error if serving failed.
func (a *Agent) Close() error {
	err := a.Down()
	a.mu.Lock()
	defer a.mu.Unlock()
	return errors.Join(err, a.serveErr)
}

// Fail makes the next n calls of method answer err (a gRPC-mapped errdefs error reaches
// the shim as that errdefs error).
func (a *Agent) Fail(method string, n int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range n {
		a.failures[method] = append(a.failures[method], err)
	}
}

// Hold makes calls of method wait until release is called before the double answers
// them: an agent busy with the call. A call whose caller gives up meanwhile is recorded
// with the caller's context error and answered with it.
func (a *Agent) Hold(method string) (release func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := make(chan struct{})
	a.holds[method] = ch
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.holds[method] == ch {
			delete(a.holds, method)
			close(ch)
		}
	}
}

// hold waits while calls of method are held; it returns the context's error if the
// caller gave up first.
func (a *Agent) hold(ctx context.Context, method string) error {
	a.mu.Lock()
	ch := a.holds[method]
	a.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Calls returns the calls received so far.
func (a *Agent) Calls() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Call(nil), a.calls...)
}

// CallsFor returns the calls about one container ID.
func (a *Agent) CallsFor(containerID string) []Call {
	var out []Call
	for _, c := range a.Calls() {
		if c.Identity.GetContainerId() == containerID {
			out = append(out, c)
		}
	}
	return out
}

// Tasks returns a copy of the double's view of the tasks, by container ID.
func (a *Agent) Tasks() map[string]Task {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Task, len(a.tasks))
	for id, t := range a.tasks {
		out[id] = *t
	}
	return out
}

// WaitFor returns once cond holds for the calls received, or with ctx's error.
func (a *Agent) WaitFor(ctx context.Context, cond func([]Call) bool) error {
	for {
		a.mu.Lock()
		ok, changed := cond(append([]Call(nil), a.calls...)), a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the agent's calls: %w", ctx.Err())
		}
	}
}

// Has returns a condition for WaitFor: a successful call of method about containerID.
func Has(method, containerID string) func([]Call) bool {
	return func(calls []Call) bool {
		for _, c := range calls {
			if c.Method == method && c.Err == nil && c.Identity.GetContainerId() == containerID {
				return true
			}
		}
		return false
	}
}

// Methods lists the methods of calls in order, "(failed)" marking those the double
// answered with an error: "Create Start Delete Shutdown".
func Methods(calls []Call) string {
	m := make([]string, 0, len(calls))
	for _, c := range calls {
		if c.Err != nil {
			m = append(m, c.Method+"(failed)")
		} else {
			m = append(m, c.Method)
		}
	}
	return strings.Join(m, " ")
}

// record answers one call: the caller's context error if it gave up while the call was
// held, else the next failure queued for method, else success and the change to the task
// view.
func (a *Agent) record(ctx context.Context, method string, id *v1.Identity, req proto.Message) error {
	held := a.hold(ctx, method)
	a.mu.Lock()
	defer a.mu.Unlock()
	err := held
	if q := a.failures[method]; err == nil && len(q) > 0 {
		err, a.failures[method] = q[0], q[1:]
	}
	a.calls = append(a.calls, Call{Method: method, Identity: id, Request: req, Err: err, At: time.Now()})
	close(a.changed)
	a.changed = make(chan struct{})
	if err != nil {
		return errgrpc.ToGRPC(err)
	}
	cid := id.GetContainerId()
	switch method {
	case MethodCreate:
		a.creates[cid]++
		a.tasks[cid] = &Task{Identity: id, Creates: a.creates[cid]}
	case MethodStart:
		if t, ok := a.tasks[cid]; ok {
			t.Started = true
		}
	case MethodDelete, MethodShutdown:
		delete(a.tasks, cid)
	}
	return nil
}

// service is the TTRPC face of the double.
type service struct{ a *Agent }

func (s *service) Create(ctx context.Context, r *v1.CreateRequest) (*v1.CreateResponse, error) {
	return &v1.CreateResponse{}, s.a.record(ctx, MethodCreate, r.GetIdentity(), r)
}

func (s *service) Start(ctx context.Context, r *v1.StartRequest) (*v1.StartResponse, error) {
	return &v1.StartResponse{}, s.a.record(ctx, MethodStart, r.GetIdentity(), r)
}

func (s *service) Delete(ctx context.Context, r *v1.DeleteRequest) (*v1.DeleteResponse, error) {
	return &v1.DeleteResponse{}, s.a.record(ctx, MethodDelete, r.GetIdentity(), r)
}

func (s *service) Shutdown(ctx context.Context, r *v1.ShutdownRequest) (*v1.ShutdownResponse, error) {
	return &v1.ShutdownResponse{}, s.a.record(ctx, MethodShutdown, r.GetIdentity(), r)
}
