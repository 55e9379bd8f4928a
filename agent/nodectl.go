package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// NodeCtl is what the agent asks node-ctl (docs/node-ctl-contract.md): its health, its
// state, and to apply the config file the agent wrote (Options.NodeCtlConfig). The client of
// nodectl/client speaks it over node-ctl's unix socket; the hollow-node mode of the scale
// benchmarks (tests/hollow) answers it in process.
type NodeCtl interface {
	Health(ctx context.Context) (*api.Health, error)
	State(ctx context.Context) (*api.State, error)
	Reload(ctx context.Context) (*api.State, error)
}

var _ NodeCtl = (*nodectl.Client)(nil)

// nodeCtlView is the agent's knowledge of node-ctl from its last poll.
type nodeCtlView struct {
	Polled    bool
	Healthy   bool
	Err       string
	DownSince *time.Time
	LastOK    time.Time
	State     *api.State
}

// pollNodeCtl reads node-ctl's health and state every NodeCtlPollInterval and re-runs the
// pools' reconcile when something that matters changed: reachability, what is applied, the
// zone, or the memory in use (which decides a deferred downscale).
func (a *Agent) pollNodeCtl(ctx context.Context) error {
	tick := time.NewTicker(a.opts.NodeCtlPollInterval)
	defer tick.Stop()
	for {
		a.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (a *Agent) pollOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.NodeCtlPollInterval)
	defer cancel()
	now := a.opts.Clock.Now()
	_, herr := a.nodectl.Health(ctx)
	var st *api.State
	if herr == nil {
		s, err := a.nodectl.State(ctx)
		if err != nil {
			herr = err
		} else {
			st = s
		}
	}
	if herr == nil {
		a.keepReported(ctx, st)
	}
	a.mu.Lock()
	old := a.nc
	nc := nodeCtlView{Polled: true, Healthy: herr == nil, DownSince: old.DownSince, LastOK: old.LastOK, State: old.State}
	if herr == nil {
		nc.DownSince, nc.LastOK, nc.State = nil, now, st
	} else {
		nc.Err = herr.Error()
		if old.DownSince == nil || old.Healthy || !old.Polled {
			nc.DownSince = ptr.To(now)
		}
	}
	a.nc = nc
	a.mu.Unlock()
	if herr == nil {
		nodeCtlUp.Set(1)
	} else {
		nodeCtlUp.Set(0)
	}
	if changedMaterially(old, nc) {
		a.triggerAll(ctx)
	}
	a.checkShims()
}

// keepReported keeps what node-ctl reported it applies in the state file, when it changed:
// an agent that starts while node-ctl does not answer takes node-ctl to enforce that.
func (a *Agent) keepReported(ctx context.Context, st *api.State) {
	rep := reportedOf(st)
	if rep == nil {
		return
	}
	if err := a.keep(func(s *nodeState) { s.NodeCtl = rep }); err != nil {
		logf.FromContext(ctx).Error(err, "keeping what node-ctl applies; an agent restarted while node-ctl does not answer takes it to enforce the config file")
	}
}

// changedMaterially is true when a poll's result can change a pass's outcome.
func changedMaterially(old, now nodeCtlView) bool {
	if old.Polled != now.Polled || old.Healthy != now.Healthy || (old.State == nil) != (now.State == nil) {
		return true
	}
	if now.State == nil {
		return false
	}
	o, n := old.State, now.State
	if o.AppliedGeneration != n.AppliedGeneration || o.Pool != n.Pool || o.Zone != n.Zone || !o.StartedAt.Equal(n.StartedAt) ||
		o.AllocatableMemoryBytes != n.AllocatableMemoryBytes || len(o.AppliedResources) != len(n.AppliedResources) {
		return true
	}
	for k, v := range n.AppliedResources {
		if o.AppliedResources[k] != v {
			return true
		}
	}
	d := n.AllocatedMemoryBytes - o.AllocatedMemoryBytes
	return d >= allocatedStep(n.AllocatableMemoryBytes) || -d >= allocatedStep(n.AllocatableMemoryBytes)
}

// nodeCtlRestartMinInterval is the least time between two runs of the node-ctl restart
// command.
const nodeCtlRestartMinInterval = 30 * time.Second

func (a *Agent) nodeCtlView() nodeCtlView {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nc
}

// applyNodeCtl writes node-ctl's config and asks it to reload; when node-ctl does not
// answer, the restart command is the fallback (at most every 30 s).
func (a *Agent) applyNodeCtl(ctx context.Context, pool *v1alpha1.SandboxPool, res corev1.ResourceList) (*api.State, error) {
	cfg := api.Config{APIVersion: api.APIVersion, Pool: api.PoolRef{Name: pool.Name, UID: string(pool.UID)},
		Generation: pool.Generation, Resources: map[string]string{}}
	for k, v := range res {
		cfg.Resources[string(k)] = v.String()
	}
	if err := nodectl.WriteConfig(a.opts.NodeCtlConfig, cfg); err != nil {
		return nil, fmt.Errorf("writing the node-ctl config: %w", err)
	}
	// From now on node-ctl may apply it, whether or not it answers.
	a.mu.Lock()
	a.sent = &cfg
	a.mu.Unlock()
	st, err := a.nodectl.Reload(ctx)
	switch {
	case err == nil:
		a.keepReported(ctx, st)
		a.mu.Lock()
		a.nc.State = st
		a.mu.Unlock()
		nodeCtlApplies.WithLabelValues("applied").Inc()
		logf.FromContext(ctx).Info("node-ctl applied", "generation", cfg.Generation, "resources", cfg.Resources)
		return st, nil
	case errors.Is(err, nodectl.ErrRejected):
		nodeCtlApplies.WithLabelValues("rejected").Inc()
		return nil, fmt.Errorf("node-ctl rejected the config: %w", err)
	}
	nodeCtlApplies.WithLabelValues("unreachable").Inc()
	a.restartNodeCtl(ctx)
	return nil, fmt.Errorf("node-ctl did not answer the reload: %w", err)
}

func (a *Agent) restartNodeCtl(ctx context.Context) {
	a.mu.Lock()
	now := a.opts.Clock.Now()
	due := a.opts.NodeCtlRestartCommand != "" && now.Sub(a.lastRestart) >= nodeCtlRestartMinInterval
	if due {
		a.lastRestart = now
	}
	pid := 0
	if a.nc.State != nil {
		pid = a.nc.State.PID
	}
	a.mu.Unlock()
	if due {
		a.runCommand(ctx, "restart", a.opts.NodeCtlRestartCommand, pid)
	}
}

// runCommand runs a node-ctl lifecycle command with sh -c and NODECTL_PID.
func (a *Agent) runCommand(ctx context.Context, what, command string, pid int) {
	log := logf.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), "NODECTL_PID="+strconv.Itoa(pid))
	out, err := cmd.CombinedOutput()
	if err != nil {
		log.Error(err, "node-ctl "+what+" command failed", "command", command, "output", string(out))
		return
	}
	log.Info("ran the node-ctl "+what+" command", "command", command)
}

// stopNodeCtl stops node-ctl, once, when it serves the pool called name (by name, and by
// UID when known): the pool is really gone. A resize rebuilds the placeholder pods but never
// stops node-ctl.
func (a *Agent) stopNodeCtl(ctx context.Context, name string, uid types.UID) {
	a.mu.Lock()
	st := a.nc.State
	serves := st != nil && st.Pool.Name == name && (uid == "" || st.Pool.UID == string(uid))
	stop := serves && !a.stopped[types.UID(st.Pool.UID)] && a.opts.NodeCtlStopCommand != ""
	if stop {
		a.stopped[types.UID(st.Pool.UID)] = true
	}
	a.mu.Unlock()
	if stop {
		logf.FromContext(ctx).Info("pool gone: stopping node-ctl", "pool", name)
		a.runCommand(ctx, "stop", a.opts.NodeCtlStopCommand, st.PID)
	}
}
