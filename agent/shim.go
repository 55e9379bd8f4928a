package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
)

// shimService is the agent's side of the PlaceholderShim API (agent/shimapi): it records what
// the shim says of each placeholder pod (created, started with the shim's PID, stopped) and
// re-runs the pool's pass. It answers without waiting for the pass: the placeholder pod's
// start never depends on the API server, the webhook or node-ctl. None of the calls stops
// node-ctl: a piece replaced in a resize goes through Delete/Shutdown too, and node-ctl is
// stopped only when the pool is really gone.
type shimService struct{ a *Agent }

var _ shimapi.Service = shimService{}

// forPool returns the pool a call is about, or "" for a task that is not a placeholder
// pool's sandbox container (a `ctr run` task, another pod, an app container).
func forPool(id *v1.Identity) string {
	if id == nil || !id.GetSandbox() {
		return ""
	}
	return id.GetPoolName()
}

func (s shimService) Create(ctx context.Context, req *v1.CreateRequest) (*v1.CreateResponse, error) {
	shimCalls.WithLabelValues("Create").Inc()
	if forPool(req.GetIdentity()) == "" {
		return &v1.CreateResponse{}, nil
	}
	if err := s.a.ownSandbox(ctx, req.Identity); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	s.a.setShim(req.Identity, shimState{})
	return &v1.CreateResponse{}, nil
}

// ownSandbox checks that id, a sandbox that names a pool, is the static pod of a manifest
// the agent wrote for that pool of its node: in the placeholder pods' namespace, named as
// that manifest's pod on this node, with the manifest's UID (kubelet keeps a static pod's
// metadata.uid, and CRI passes it on). A pod anyone else creates may carry a pool's name,
// UID and RuntimeClass, but never that UID: the API server gives every pod a UID of its own.
func (a *Agent) ownSandbox(ctx context.Context, id *v1.Identity) error {
	pool, pod := id.GetPoolName(), id.GetPodNamespace()+"/"+id.GetPodName()
	if id.GetPodNamespace() != a.opts.PodNamespace {
		return fmt.Errorf("pod %s names pool %s but is not in the placeholder pods' namespace %s: %w", pod, pool, a.opts.PodNamespace, errdefs.ErrPermissionDenied)
	}
	p, err := a.pool(ctx, pool)
	if err != nil {
		return fmt.Errorf("pool %s of pod %s: %w", pool, pod, errdefs.ErrNotFound)
	}
	if uid := id.GetPoolUid(); uid != string(p.UID) {
		return fmt.Errorf("pod %s belongs to pool %s with UID %s, the pool now has UID %s: %w", pod, pool, uid, p.UID, errdefs.ErrFailedPrecondition)
	}
	f, err := a.pieceFile(pool, id.GetPodName())
	if err != nil {
		return fmt.Errorf("pod %s is not a placeholder pod of pool %s on this node: %w: %w", pod, pool, err, errdefs.ErrPermissionDenied)
	}
	if f.PoolUID != string(p.UID) || (f.UID != "" && string(f.UID) != id.GetPodUid()) {
		return fmt.Errorf("pod %s (UID %s) is not the static pod of %s (UID %s, pool UID %s): %w",
			pod, id.GetPodUid(), f.Path, f.UID, f.PoolUID, errdefs.ErrPermissionDenied)
	}
	return nil
}

// pieceFile reads the manifest of pool whose pod kubelet names mirror on this node.
func (a *Agent) pieceFile(pool, mirror string) (manifest.File, error) {
	n, ok := a.pieceNumber(mirror)
	if !ok {
		return manifest.File{}, fmt.Errorf("%s is not the name of a placeholder pod of node %s", mirror, a.opts.NodeName)
	}
	f, err := manifest.Read(filepath.Join(a.opts.ManifestDir, manifest.FileName(pool, n)))
	if err != nil {
		return manifest.File{}, err
	}
	if f.PoolName != pool {
		return manifest.File{}, fmt.Errorf("%s is a manifest of pool %s", f.Path, f.PoolName)
	}
	return f, nil
}

func (s shimService) Start(ctx context.Context, req *v1.StartRequest) (*v1.StartResponse, error) {
	shimCalls.WithLabelValues("Start").Inc()
	if forPool(req.GetIdentity()) != "" {
		if err := s.a.ownSandbox(ctx, req.Identity); err != nil {
			return nil, errgrpc.ToGRPC(err)
		}
		st := shimState{Started: true, PID: int(req.GetShimPid())}
		st.startTime, _ = processStartTime(st.PID)
		if cur, ok := s.a.shimFor(req.Identity.GetPodName()); ok && cur.Started && !cur.Exited && cur.PID == st.PID &&
			cur.PodUID == req.Identity.GetPodUid() {
			// The shim repeats itself to a restarted agent; this agent knew already.
			return &v1.StartResponse{}, nil
		}
		s.a.setShim(req.Identity, st)
		s.a.watchShim(req.Identity.GetPodName(), st)
	}
	return &v1.StartResponse{}, nil
}

func (s shimService) Delete(_ context.Context, req *v1.DeleteRequest) (*v1.DeleteResponse, error) {
	shimCalls.WithLabelValues("Delete").Inc()
	s.a.podStopped(req.GetIdentity())
	return &v1.DeleteResponse{}, nil
}

func (s shimService) Shutdown(_ context.Context, req *v1.ShutdownRequest) (*v1.ShutdownResponse, error) {
	shimCalls.WithLabelValues("Shutdown").Inc()
	s.a.podStopped(req.GetIdentity())
	return &v1.ShutdownResponse{}, nil
}

// watchShim reports the exit of the shim process of the pod called name as soon as it
// happens, through a pidfd, so that a killed shim shows even when kubelet starts the pod's
// sandbox again within a poll. Without a pidfd (an old kernel) the poll's check stands.
func (a *Agent) watchShim(name string, st shimState) {
	if st.PID <= 0 {
		return
	}
	stop, err := watchExit(st.PID, st.startTime, func() { a.shimExited(name, st.PID) })
	if err != nil {
		return
	}
	a.mu.Lock()
	if old := a.shimWatch[name]; old != nil {
		old()
	}
	a.shimWatch[name] = stop
	a.mu.Unlock()
}

// shimExited marks the pod called name exited if its shim is still the one of pid.
func (a *Agent) shimExited(name string, pid int) {
	a.mu.Lock()
	st, ok := a.shim[name]
	if !ok || !st.Started || st.Exited || st.PID != pid {
		a.mu.Unlock()
		return
	}
	st.Exited = true
	a.shim[name] = st
	a.mu.Unlock()
	a.trigger(st.Pool)
}

// watchExit calls onExit once process pid (started at startTime, when known) has exited.
// stop ends the watch without calling it.
func watchExit(pid int, startTime uint64, onExit func()) (stop func(), err error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if t, err := processStartTime(pid); err != nil || (startTime != 0 && t != startTime) {
		// Gone already, and its PID perhaps reused.
		_ = unix.Close(fd)
		go onExit()
		return func() {}, nil
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	go func() {
		first := true
		// A pidfd turns readable when its process exits: wait for that.
		err := rc.Read(func(uintptr) bool {
			if first {
				first = false
				return false
			}
			return true
		})
		if err == nil {
			onExit()
		}
	}()
	return func() { _ = f.Close() }, nil
}

// shimState is what the shim said of one placeholder pod since this agent started.
type shimState struct {
	// Pool, PoolUID and PodUID identify the pod (PodUID is kubelet's UID of the static pod).
	Pool, PoolUID, PodUID string
	// Started: the shim started the pod's sandbox and has not stopped it since.
	Started bool
	// PID is the shim's process; startTime its start time in /proc (0 when unknown), so a
	// reused PID does not pass for the shim.
	PID       int
	startTime uint64
	// Exited: the shim process is gone without a word (killed).
	Exited bool
}

// alive reports whether the shim process still runs (true when its PID is unknown).
func (s shimState) alive() bool {
	if s.PID <= 0 {
		return true
	}
	t, err := processStartTime(s.PID)
	return err == nil && (s.startTime == 0 || t == s.startTime)
}

// podStopped records that a pod stopped, if the call is about the pod the agent last saw
// under that name (a late call about an older pod changes nothing), or, when the agent saw
// none since it started, about the static pod of one of the pool's manifests. A call about
// any other pod changes nothing.
func (a *Agent) podStopped(id *v1.Identity) {
	if forPool(id) == "" || id.GetPodNamespace() != a.opts.PodNamespace {
		return
	}
	a.mu.Lock()
	cur, ok := a.shim[id.GetPodName()]
	a.mu.Unlock()
	if ok && cur.PodUID != id.GetPodUid() {
		return
	}
	if !ok {
		f, err := a.pieceFile(id.GetPoolName(), id.GetPodName())
		if err != nil || (f.UID != "" && string(f.UID) != id.GetPodUid()) {
			return
		}
	}
	a.setShim(id, shimState{})
}

// setShim records st for the pod of id and re-runs its pool's pass.
func (a *Agent) setShim(id *v1.Identity, st shimState) {
	st.Pool, st.PoolUID, st.PodUID = id.GetPoolName(), id.GetPoolUid(), id.GetPodUid()
	a.mu.Lock()
	a.shim[id.GetPodName()] = st
	a.mu.Unlock()
	a.trigger(st.Pool)
}

// shimFor returns what the shim said of the pod called name, if anything since the agent
// started.
func (a *Agent) shimFor(name string) (shimState, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.shim[name]
	return st, ok
}

// shimRuns reports whether the shim started the pod called name of the pool with poolUID
// (the static pod with podUID, when known) and its process still runs.
func (a *Agent) shimRuns(name, poolUID string, podUID types.UID) bool {
	st, ok := a.shimFor(name)
	return ok && st.Started && !st.Exited && st.PoolUID == poolUID && (podUID == "" || st.PodUID == string(podUID)) && st.alive()
}

// checkShims marks the started pods whose shim process is gone, and re-runs their pools'
// passes: a killed shim says nothing, so the agent looks at every poll.
func (a *Agent) checkShims() {
	a.mu.Lock()
	var pools []string
	for name, st := range a.shim {
		if st.Started && !st.Exited && !st.alive() {
			st.Exited = true
			a.shim[name] = st
			pools = append(pools, st.Pool)
		}
	}
	a.mu.Unlock()
	for _, p := range pools {
		a.trigger(p)
	}
}

// forgetShims drops what the shim said of the pods of pool.
func (a *Agent) forgetShims(pool string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, st := range a.shim {
		if st.Pool == pool {
			delete(a.shim, name)
			if stop := a.shimWatch[name]; stop != nil {
				stop()
				delete(a.shimWatch, name)
			}
		}
	}
}

// processStartTime is the start time of process pid, field 22 of /proc/<pid>/stat.
func processStartTime(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no pid")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command, field 2, is in parentheses and may hold spaces: count after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	const startTimeField = 22 - 3 // fields after the command start at field 3
	if len(fields) <= startTimeField {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[startTimeField], 10, 64)
}

// serveShim serves the PlaceholderShim API on ShimAddress until ctx ends.
func (a *Agent) serveShim(ctx context.Context) error {
	l, err := shimapi.Listen(a.opts.ShimAddress)
	if err != nil {
		return err
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		_ = l.Close()
		return err
	}
	shimapi.Register(srv, shimService{a: a})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-done:
		if errors.Is(err, ttrpc.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving the shim API: %w", err)
	}
}
