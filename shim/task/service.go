// Package task is the placeholder shim's task service: containerd's Task API (v3) with
// every task synthetic (docs/design.md §3.6). There is no process and no cgroup: a task is a state
// (created → running → stopped) with pid 0, the lifecycle events containerd and CRI expect,
// and notifications to the placeholder agent (agent/shimapi). docs/shim.md has the table.
package task

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/cgroups/v3"
	cg1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	cg2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/shim/agentclient"
)

var (
	_     = shim.TTRPCService(&service{})
	_     = taskAPI.TTRPCTaskService(&service{})
	empty = &ptypes.Empty{}
)

// ExitStatus is the status every placeholder task exits with, on Kill and on Shutdown
// alike: there is no process whose status could be reported (docs/design.md §3.6).
const ExitStatus = 0

// flushTimeout bounds the wait for the last exit events to reach containerd on shutdown;
// pkg/shim gives shutdown callbacks 5 s in all.
const flushTimeout = 2 * time.Second

// Agent is what the service forwards to: agentclient.Client, or a test double.
type Agent interface {
	Create(context.Context, *v1.CreateRequest) error
	Start(context.Context, *v1.StartRequest) error
	Delete(context.Context, *v1.DeleteRequest) error
	Shutdown(context.Context, *v1.ShutdownRequest) error
	// Announce repeats a delivered Start to an agent that restarted, until ctx ends.
	Announce(context.Context, *v1.StartRequest)
	Close() error
}

var _ Agent = (*agentclient.Client)(nil)

// NewTaskService returns the task service of a shim process. Shutting sd down (the
// Shutdown RPC, or SIGTERM to the shim) reports every remaining task exited and tells the
// agent, before the shim's event publisher closes.
func NewTaskService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service, agent Agent) (taskAPI.TTRPCTaskService, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	s := &service{
		context:    ctx,
		namespace:  ns,
		shutdown:   sd,
		agent:      agent,
		events:     make(chan any, 128),
		containers: make(map[string]*container),
		creating:   make(map[string]struct{}),
	}
	go s.forward(ctx, publisher)
	sd.RegisterCallback(s.onShutdown)
	if address, err := shim.ReadAddress("address"); err == nil {
		sd.RegisterCallback(func(context.Context) error { return shim.RemoveSocket(address) })
	}
	return s, nil
}

// container is one synthetic task.
type container struct {
	id       string
	bundle   string
	identity *v1.Identity
	request  *taskAPI.CreateTaskRequest // stdio paths and terminal, for State
	io       *stdio
	exited   chan struct{} // closed when the task stops

	// Guarded by service.mu.
	status     task.Status
	exitStatus uint32
	exitedAt   time.Time
}

type service struct {
	context   context.Context // the shim's; outlives requests
	namespace string
	shutdown  shutdown.Service
	agent     Agent
	events    chan any // to forward, in the order the state changed

	// mu guards containers, creating, last and the mutable fields of each container;
	// events are queued under it so they leave in the order of the state changes.
	mu         sync.Mutex
	containers map[string]*container
	// creating holds the IDs whose Create waits for the agent: taken, not yet tasks.
	creating map[string]struct{}
	// last is the identity of the task most recently created or deleted: what the
	// Shutdown notification names.
	last *v1.Identity

	// lastKill is when the last Kill that stopped a task returned (unix nanoseconds).
	lastKill atomic.Int64
}

// killReplyGrace is how long a shutdown waits after the last Kill that stopped a task. A
// synthetic task stops inside Kill, so a client waiting on it (an attached `ctr run`) can
// delete the task and shut the shim down before the Kill reply has left the process;
// pkg/shim exits without draining the TTRPC server. A real process exits a little after its
// signal; this grace gives the reply the same head start.
const killReplyGrace = 100 * time.Millisecond

// RegisterTTRPC registers the task service with the shim's TTRPC server.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s)
	return nil
}

// Create records a synthetic task and tells the agent; the task exists for containerd
// only once the agent has answered.
func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	if r.Checkpoint != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks cannot be restored from a checkpoint")
	}
	spec, err := ReadSpec(r.Bundle)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	c := &container{
		id:       r.ID,
		bundle:   r.Bundle,
		identity: identity(s.namespace, r.ID, spec.Annotations),
		request:  r,
		exited:   make(chan struct{}),
		status:   task.Status_CREATED,
	}

	// Take the ID while the agent is asked, so a second Create or a Shutdown sees it.
	s.mu.Lock()
	_, exists := s.containers[r.ID]
	if _, creating := s.creating[r.ID]; exists || creating {
		s.mu.Unlock()
		return nil, errgrpc.ToGRPCf(errdefs.ErrAlreadyExists, "task %s", r.ID)
	}
	s.creating[r.ID] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.creating, r.ID)
		s.mu.Unlock()
	}()

	if c.io, err = openStdio(s.context, r.Stdin, r.Stdout, r.Stderr); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := s.agent.Create(ctx, &v1.CreateRequest{Identity: c.identity, Bundle: r.Bundle}); err != nil {
		_ = c.io.Close()
		log.G(ctx).WithError(err).WithField("id", r.ID).Error("placeholder agent did not accept the task")
		return nil, errgrpc.ToGRPC(err)
	}

	s.mu.Lock()
	s.containers[r.ID] = c
	s.last = c.identity
	s.send(&eventstypes.TaskCreate{
		ContainerID: r.ID,
		Bundle:      r.Bundle,
		Rootfs:      r.Rootfs,
		IO: &eventstypes.TaskIO{
			Stdin:    r.Stdin,
			Stdout:   r.Stdout,
			Stderr:   r.Stderr,
			Terminal: r.Terminal,
		},
		Checkpoint: r.Checkpoint,
	})
	s.mu.Unlock()
	return &taskAPI.CreateTaskResponse{}, nil
}

// Start moves a created task to running once the agent knows.
func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	if err := s.expect(c, task.Status_CREATED, "start"); err != nil {
		return nil, err
	}
	start := &v1.StartRequest{Identity: c.identity, ShimPid: uint32(os.Getpid())}
	if err := s.agent.Start(ctx, start); err != nil {
		log.G(ctx).WithError(err).WithField("id", r.ID).Error("placeholder agent did not accept the start")
		return nil, errgrpc.ToGRPC(err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if c.status != task.Status_CREATED {
		// Killed while the agent was asked.
		return nil, errgrpc.ToGRPCf(errdefs.ErrFailedPrecondition, "task %s stopped before it started", r.ID)
	}
	c.status = task.Status_RUNNING
	s.send(&eventstypes.TaskStart{ContainerID: r.ID})
	if c.identity.GetSandbox() {
		// Tell an agent that restarts while the pod runs that it does (until the task stops).
		actx, cancel := context.WithCancel(s.context)
		go func() {
			defer cancel()
			select {
			case <-c.exited:
			case <-actx.Done():
			}
		}()
		go s.agent.Announce(actx, start)
	}
	return &taskAPI.StartResponse{}, nil
}

// Kill stops the task with ExitStatus, whatever the signal; signal 0 only checks that the
// task has not exited. Nothing is forwarded: the agent hears of it on Delete.
func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*ptypes.Empty, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[r.ID]
	if !ok {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "task %s not created", r.ID)
	}
	if c.status == task.Status_STOPPED {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "process already finished")
	}
	if r.Signal == 0 {
		return empty, nil
	}
	s.exit(c, true)
	defer func() { s.lastKill.Store(time.Now().UnixNano()) }()
	return empty, nil
}

// Delete drops the task's state and tells the agent. A running task must be killed first,
// as with runc.
func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	s.mu.Lock()
	c, ok := s.containers[r.ID]
	if !ok {
		s.mu.Unlock()
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "task %s not created", r.ID)
	}
	if c.status == task.Status_RUNNING {
		s.mu.Unlock()
		return nil, errgrpc.ToGRPCf(errdefs.ErrFailedPrecondition, "task %s is running: kill it before deleting it", r.ID)
	}
	if c.status == task.Status_CREATED {
		// Deleted without having run (a failed start, or ctr task delete): it exits now,
		// without an exit event, as runc's created init does.
		s.exit(c, false)
	}
	delete(s.containers, r.ID)
	s.last = c.identity
	exitedAt := protobuf.ToTimestamp(c.exitedAt)
	resp := &taskAPI.DeleteResponse{ExitStatus: c.exitStatus, ExitedAt: exitedAt}
	s.send(&eventstypes.TaskDelete{ContainerID: r.ID, ExitStatus: c.exitStatus, ExitedAt: exitedAt})
	s.mu.Unlock()

	if err := s.agent.Delete(ctx, &v1.DeleteRequest{
		Identity: c.identity, ExitStatus: resp.ExitStatus, ExitedAt: timestamppb.New(c.exitedAt),
	}); err != nil {
		log.G(ctx).WithError(err).WithField("id", r.ID).Warn("placeholder agent not told of the delete")
	}
	return resp, nil
}

// State reports the synthetic task: pid 0, its status and stdio.
func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[r.ID]
	if !ok {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "task %s not created", r.ID)
	}
	return &taskAPI.StateResponse{
		ID:         c.id,
		Bundle:     c.bundle,
		Status:     c.status,
		Stdin:      c.request.Stdin,
		Stdout:     c.request.Stdout,
		Stderr:     c.request.Stderr,
		Terminal:   c.request.Terminal,
		ExitStatus: c.exitStatus,
		ExitedAt:   protobuf.ToTimestamp(c.exitedAt),
	}, nil
}

// Wait returns when the task stops (Kill, or the shim shutting down).
func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.exited:
	case <-ctx.Done():
		return nil, errgrpc.ToGRPC(ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskAPI.WaitResponse{ExitStatus: c.exitStatus, ExitedAt: protobuf.ToTimestamp(c.exitedAt)}, nil
}

// Connect reports the shim's pid; the task's is 0.
func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	return &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid())}, nil
}

// Shutdown stops the shim once it has no tasks left, as runc's shim does (containerd calls
// it after every delete; a pod's containers share one shim). With Now it stops anyway:
// the remaining tasks exit first.
func (s *service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*ptypes.Empty, error) {
	s.mu.Lock()
	if len(s.containers)+len(s.creating) > 0 && !r.Now {
		s.mu.Unlock()
		return empty, nil
	}
	s.mu.Unlock()
	s.shutdown.Shutdown()
	return empty, nil
}

// onShutdown runs when the shim shuts down, for any reason: every remaining task exits with
// ExitStatus, the exit events are delivered to containerd, and the agent is told. Then the
// process exits, and its in-memory state with it.
func (s *service) onShutdown(ctx context.Context) error {
	if wait := time.Until(time.Unix(0, s.lastKill.Load()).Add(killReplyGrace)); wait > 0 {
		time.Sleep(wait) // see killReplyGrace: not a synchronisation, a head start for a reply
	}
	s.mu.Lock()
	now := false // tasks were left
	for _, c := range s.containers {
		if !now || c.identity.GetSandbox() {
			s.last = c.identity // name the pod's sandbox when it is among them
		}
		now = true
		if c.status != task.Status_STOPPED {
			s.exit(c, true)
		}
	}
	// The stopped tasks stay until the process exits, for a late Wait or State.
	req := &v1.ShutdownRequest{Identity: s.last, Now: now}
	s.mu.Unlock()

	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	s.flush(fctx)
	cancel()
	// A shim whose tasks the agent never accepted has nothing to tell it.
	if req.Identity != nil {
		if err := s.agent.Shutdown(ctx, req); err != nil {
			log.G(ctx).WithError(err).Warn("placeholder agent not told of the shutdown")
		}
	}
	return s.agent.Close()
}

// Stats returns empty cgroup metrics of the host's cgroup version: there is no cgroup, but
// CRI decodes these (kubelet's ContainerStats, its stats collector, the OOM check of an exit
// with 137) and logs an error for "not implemented" or any other type.
func (s *service) Stats(ctx context.Context, r *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	if _, err := s.get(r.ID); err != nil {
		return nil, err
	}
	var metrics any = &cg1stats.Metrics{}
	if cgroups.Mode() == cgroups.Unified {
		metrics = &cg2stats.Metrics{}
	}
	data, err := typeurl.MarshalAnyToProto(metrics)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return &taskAPI.StatsResponse{Stats: data}, nil
}

// Pids lists the task's one synthetic process, pid 0, until it exits. containerd relies on
// it: when it reloads its shims after a restart, a task with no processes is a leaked shim
// and is deleted.
func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[r.ID]
	if !ok {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "task %s not created", r.ID)
	}
	if c.status == task.Status_STOPPED {
		return &taskAPI.PidsResponse{}, nil
	}
	return &taskAPI.PidsResponse{Processes: []*task.ProcessInfo{{Pid: 0}}}, nil
}

// Update accepts new resources and applies them nowhere: there is no cgroup.
func (s *service) Update(ctx context.Context, r *taskAPI.UpdateTaskRequest) (*ptypes.Empty, error) {
	if _, err := s.get(r.ID); err != nil {
		return nil, err
	}
	return empty, nil
}

// CloseIO closes the task's end of stdin.
func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*ptypes.Empty, error) {
	if r.ExecID != "" {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "exec %s: placeholder tasks have no exec processes", r.ExecID)
	}
	c, err := s.get(r.ID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Stdin && c.io != nil {
		if err := c.io.CloseStdin(); err != nil {
			return nil, errgrpc.ToGRPC(err)
		}
	}
	return empty, nil
}

// Exec is not supported: a placeholder has nothing to run a process in.
func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*ptypes.Empty, error) {
	return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks cannot exec processes")
}

// ResizePty is not supported: there is no terminal.
func (s *service) ResizePty(ctx context.Context, r *taskAPI.ResizePtyRequest) (*ptypes.Empty, error) {
	return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks have no terminal")
}

// Pause is not supported.
func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*ptypes.Empty, error) {
	return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks cannot be paused")
}

// Resume is not supported.
func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*ptypes.Empty, error) {
	return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks cannot be paused")
}

// Checkpoint is not supported.
func (s *service) Checkpoint(ctx context.Context, r *taskAPI.CheckpointTaskRequest) (*ptypes.Empty, error) {
	return nil, errgrpc.ToGRPCf(errdefs.ErrNotImplemented, "placeholder tasks cannot be checkpointed")
}

func (s *service) get(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, errgrpc.ToGRPCf(errdefs.ErrNotFound, "task %s not created", id)
	}
	return c, nil
}

// expect fails with FailedPrecondition unless c is in status want.
func (s *service) expect(c *container, want task.Status, op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.status != want {
		return errgrpc.ToGRPCf(errdefs.ErrFailedPrecondition, "cannot %s task %s: it is %s", op, c.id, c.status)
	}
	return nil
}

// exit stops c with ExitStatus, closes its stdio and releases its waiters; with event, the
// exit is published. s.mu must be held.
func (s *service) exit(c *container, event bool) {
	c.status = task.Status_STOPPED
	c.exitStatus = ExitStatus
	c.exitedAt = time.Now()
	if err := c.io.Close(); err != nil {
		log.G(s.context).WithError(err).WithField("id", c.id).Warn("closing stdio")
	}
	close(c.exited)
	if event {
		s.send(&eventstypes.TaskExit{
			ContainerID: c.id,
			ID:          c.id,
			ExitStatus:  c.exitStatus,
			ExitedAt:    protobuf.ToTimestamp(c.exitedAt),
		})
	}
}

// send queues an event for forward. Queue under s.mu so events leave in state order.
func (s *service) send(evt any) {
	select {
	case s.events <- evt:
	case <-s.shutdown.Done():
	}
}

// flushed is queued by flush: forward closes it once every event before it was published.
type flushed chan struct{}

// flush waits until the events queued so far are published, or ctx ends.
func (s *service) flush(ctx context.Context) {
	done := make(flushed)
	select {
	case s.events <- done:
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// forward publishes the queued events in order, until the shim has shut down.
func (s *service) forward(ctx context.Context, publisher shim.Publisher) {
	ctx = context.WithoutCancel(ctx)
	defer publisher.Close()
	publish := func(e any) {
		if f, ok := e.(flushed); ok {
			close(f)
			return
		}
		if err := publisher.Publish(ctx, runtime.GetTopic(e), e); err != nil {
			log.G(ctx).WithError(err).Error("post event")
		}
	}
	for {
		select {
		case e := <-s.events:
			publish(e)
		case <-s.shutdown.Done():
			for {
				select {
				case e := <-s.events:
					publish(e)
				default:
					return
				}
			}
		}
	}
}
