package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// shimCreateTimeout bounds how long Create waits to align node-ctl (the shim retries, and
// kubelet after it).
const shimCreateTimeout = 10 * time.Second

// shimService is the agent's side of the PlaceholderShim API (agent/shimapi): Create aligns
// node-ctl with the pool before the pod's sandbox is reported created; Start is the signal
// for PlaceholderPodReady; Delete and Shutdown clear it. None of them stops node-ctl: a pod
// rebuilt for a resize goes through Delete/Shutdown too, and node-ctl is stopped only when
// the pool is really gone.
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
	pool := forPool(req.GetIdentity())
	if pool == "" {
		return &v1.CreateResponse{}, nil
	}
	a := s.a
	p, err := a.pool(ctx, pool)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("pool %s of pod %s/%s: %w", pool, req.Identity.GetPodNamespace(), req.Identity.GetPodName(), errdefs.ErrNotFound))
	}
	if uid := req.Identity.GetPoolUid(); uid != "" && uid != string(p.UID) {
		return nil, errgrpc.ToGRPC(fmt.Errorf("pod %s/%s belongs to pool %s with UID %s, the pool now has UID %s: %w",
			req.Identity.GetPodNamespace(), req.Identity.GetPodName(), pool, uid, p.UID, errdefs.ErrFailedPrecondition))
	}
	a.mu.Lock()
	a.shim[pool] = shimState{PodUID: req.Identity.GetPodUid()}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, shimCreateTimeout)
	defer cancel()
	a.syncMu.Lock()
	_, err = a.sync(ctx, pool)
	a.syncMu.Unlock()
	if err != nil {
		logf.FromContext(ctx).Error(err, "aligning node-ctl for the shim's Create", "pool", pool)
		return nil, errgrpc.ToGRPC(fmt.Errorf("aligning pool %s: %w", pool, err))
	}
	return &v1.CreateResponse{}, nil
}

func (s shimService) Start(_ context.Context, req *v1.StartRequest) (*v1.StartResponse, error) {
	shimCalls.WithLabelValues("Start").Inc()
	if pool := forPool(req.GetIdentity()); pool != "" {
		s.a.setShim(pool, shimState{PodUID: req.Identity.GetPodUid(), Started: true})
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

// podStopped records that the pool's pod stopped, if the call is about the pod the agent
// last saw started (a late call about an older pod changes nothing).
func (a *Agent) podStopped(id *v1.Identity) {
	pool := forPool(id)
	if pool == "" {
		return
	}
	a.mu.Lock()
	cur, ok := a.shim[pool]
	a.mu.Unlock()
	if !ok || cur.PodUID == id.GetPodUid() {
		a.setShim(pool, shimState{PodUID: id.GetPodUid()})
	}
}

func (a *Agent) setShim(pool string, st shimState) {
	a.mu.Lock()
	a.shim[pool] = st
	a.mu.Unlock()
	a.trigger(pool)
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
