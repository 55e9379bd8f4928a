package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/nodectl/api"
	nodectl "github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Reasons of the agent's conditions and events.
const (
	ReasonPodStarted          = "PodStarted"
	ReasonPodNotStarted       = "PodNotStarted"
	ReasonMirrorPodReady      = "MirrorPodReady"
	ReasonMirrorPodNotReady   = "MirrorPodNotReady"
	ReasonNodeCtlHealthy      = "Healthy"
	ReasonNodeCtlUnreachable  = "Unreachable"
	ReasonSynced              = "Synced"
	ReasonResizing            = "Resizing"
	ReasonWaitingForPod       = "WaitingForPod"
	ReasonNodeCtlRejected     = "NodeCtlRejected"
	ReasonResizeDeferred      = "ResizeDeferred"
	ReasonResizeInProgress    = "ResizeInProgress"
	ReasonNoResize            = "NoResize"
	ReasonResizeCompleted     = "ResizeCompleted"
	ReasonResizeDeferredLong  = "ResizeDeferredTooLong"
	ReasonInvalidPool         = "InvalidPool"
	ReasonNodeCtlStopped      = "NodeCtlStopped"
	ActionResize              = "Resize"
	ActionValidate            = "Validate"
	ActionStopNodeCtl         = "StopNodeCtl"
	overrideSourceSpec        = "spec.override"
	nodeCtlRestartMinInterval = 30 * time.Second
)

// reconcile is one level-triggered pass over one pool: everything is derived from what is
// observed now (pool, manifest on disk, mirror pod, node-ctl's state), so a crash or a
// restart at any point resumes correctly.
func (a *Agent) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	return a.sync(ctx, req.Name)
}

func (a *Agent) sync(ctx context.Context, name string) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("pool", name)
	ctx = logf.IntoContext(ctx, log)
	pool, err := a.pool(ctx, name)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, a.poolGone(ctx, name, "")
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if pool.DeletionTimestamp != nil {
		return ctrl.Result{}, a.poolGone(ctx, name, pool.UID)
	}
	if !a.holdsLease(name) {
		// A new pool's Lease is taken at once, not on the next renewal tick: until it
		// exists the controller reports the agent missing (LeaseNotFound).
		a.renewLease(ctx, name)
	}
	pool, err = a.defaulted(pool)
	if err != nil {
		log.Error(err, "pool fails the schema; keeping the current manifest")
		a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, ReasonInvalidPool, ActionValidate, "Pool fails the schema, manifest left as it is: %v", err)
		return ctrl.Result{}, nil
	}

	desired := effectiveResources(pool)
	pod := a.mirrorPod(ctx, pool)
	a.mu.Lock()
	nc := a.nc
	a.mu.Unlock()
	applied := appliedResources(nc.State, pool)
	var podRequests corev1.ResourceList
	if pod != nil {
		podRequests = podRequestsOf(pod)
	}
	var allocated int64
	if nc.State != nil {
		allocated = nc.State.AllocatedMemoryBytes
	}
	plan := planResize(resizeInput{Desired: desired, Applied: applied, Pod: podRequests,
		AllocatedMemory: allocated, Watermark: a.opts.Watermark})

	// 1. The manifest (raised before node-ctl grows, lowered after it shrank).
	if err := a.ensureManifest(ctx, pool, plan.Manifest); err != nil {
		return ctrl.Result{}, err
	}
	// 2. node-ctl, when the plan moves it.
	var nodeCtlErr error
	if plan.NodeCtl != nil && nc.Healthy {
		st, err := a.applyNodeCtl(ctx, pool, plan.NodeCtl)
		if err != nil {
			nodeCtlErr = err
		} else {
			a.mu.Lock()
			a.nc.State = st
			a.mu.Unlock()
			nc.State = st
			// Re-plan against what node-ctl now runs (the manifest may follow a shrink).
			applied = appliedResources(st, pool)
			plan = planResize(resizeInput{Desired: desired, Applied: applied, Pod: podRequests,
				AllocatedMemory: st.AllocatedMemoryBytes, Watermark: a.opts.Watermark})
			if err := a.ensureManifest(ctx, pool, plan.Manifest); err != nil {
				return ctrl.Result{}, err
			}
		}
	} else if plan.NodeCtl != nil && nc.Polled {
		// node-ctl is down while the pool needs it: stopped when an earlier pool of this
		// node was deleted (the class was recreated), or its unit gave up. Start it the way
		// a reload that gets no answer does (the restart command, at most every 30 s).
		a.restartNodeCtl(ctx)
	}
	a.noteDeferral(pool, plan)

	// 3. Status, only when a field changed.
	if err := a.report(ctx, pool, pod, nc, plan, applied == nil, nodeCtlErr, desired); err != nil {
		return ctrl.Result{}, err
	}
	if !plan.Synced {
		return ctrl.Result{RequeueAfter: a.opts.NodeCtlPollInterval}, nil
	}
	return ctrl.Result{}, nil
}

// defaulted runs the pool through the compiled CUE schema, like the webhook does, and
// returns it with every schema default filled in (the agent acts on the defaulted spec, so a
// default is never restated in Go). On error it returns the pool unchanged.
func (a *Agent) defaulted(pool *v1alpha1.SandboxPool) (*v1alpha1.SandboxPool, error) {
	p := pool.DeepCopy()
	p.APIVersion, p.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.KindSandboxPool
	p.ManagedFields = nil
	b, err := json.Marshal(p)
	if err != nil {
		return pool, err
	}
	out, err := a.schema.Default(schema.KindSandboxPool, b)
	if err != nil {
		return pool, err
	}
	var d v1alpha1.SandboxPool
	if err := json.Unmarshal(out, &d); err != nil {
		return pool, fmt.Errorf("decoding the defaulted pool: %w", err)
	}
	// The schema covers what users write; keep the server's metadata as it is.
	d.ObjectMeta = pool.ObjectMeta
	return &d, nil
}

// effectiveResources is the override's policy when enabled, else the class snapshot.
func effectiveResources(pool *v1alpha1.SandboxPool) corev1.ResourceList {
	if o := pool.Spec.Override; o != nil && o.Enabled && o.ResourcePolicy != nil {
		return o.ResourcePolicy.Resources.DeepCopy()
	}
	return pool.Spec.ResourcePolicy.Resources.DeepCopy()
}

// appliedResources is what node-ctl runs for this pool, nil when it runs nothing for it.
func appliedResources(st *api.State, pool *v1alpha1.SandboxPool) corev1.ResourceList {
	if st == nil || !st.Applied() || st.Pool.UID != string(pool.UID) {
		return nil
	}
	out := corev1.ResourceList{}
	for k, v := range st.AppliedResources {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil
		}
		out[corev1.ResourceName(k)] = q
	}
	return out
}

// mirrorPod is the pool's placeholder pod as the API server shows it (the mirror pod of the
// static manifest), nil when there is none.
func (a *Agent) mirrorPod(ctx context.Context, pool *v1alpha1.SandboxPool) *corev1.Pod {
	var pods corev1.PodList
	if err := a.client.List(ctx, &pods, client.MatchingFields{indexNode: a.opts.NodeName},
		client.MatchingLabels{v1alpha1.LabelPoolName: naming.LabelValue(pool.Name)}); err != nil {
		logf.FromContext(ctx).Error(err, "listing the placeholder pod")
		return nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[v1alpha1.AnnotationPoolName] == pool.Name && p.DeletionTimestamp == nil &&
			p.Annotations[v1alpha1.AnnotationPoolUID] == string(pool.UID) {
			return p
		}
	}
	return nil
}

func podRequestsOf(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		for k, v := range c.Resources.Requests {
			q := out[k]
			q.Add(v)
			out[k] = q
		}
	}
	return out
}

// ensureManifest renders the pool's manifest with the requests of the plan and writes it
// when the file is missing or differs (self-heal).
func (a *Agent) ensureManifest(ctx context.Context, pool *v1alpha1.SandboxPool, requests corev1.ResourceList) error {
	data, err := manifest.Render(manifest.Spec{
		PoolName: pool.Name, PoolUID: string(pool.UID), ClassName: pool.Spec.ClassRef.Name, NodeName: pool.Spec.NodeName,
		Resources: requests, Template: pool.Spec.PlaceholderPod, Namespace: a.opts.PodNamespace,
		Image: a.opts.PauseImage, NetnsEnabled: a.opts.NetnsEnabled,
	})
	if err != nil {
		return fmt.Errorf("rendering the manifest of %s: %w", pool.Name, err)
	}
	rewritten, err := manifest.Ensure(a.opts.ManifestDir, pool.Name, data)
	if err != nil {
		return fmt.Errorf("writing the manifest of %s: %w", pool.Name, err)
	}
	if rewritten {
		manifestWrites.Inc()
		logf.FromContext(ctx).Info("wrote the placeholder manifest", "file", manifest.FileName(pool.Name),
			"cpu", requests.Cpu().String(), "memory", requests.Memory().String())
	}
	return nil
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
	st, err := a.nodectl.Reload(ctx)
	switch {
	case err == nil:
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

// poolGone handles a pool that is deleted or being deleted: its manifest goes (kubelet then
// removes the pod and the controller releases the pool), and node-ctl is stopped, once.
// A resize rebuilds the pod but never gets here: node-ctl is stopped only when the pool is
// really gone.
func (a *Agent) poolGone(ctx context.Context, name string, uid types.UID) error {
	if err := manifest.Remove(a.opts.ManifestDir, name); err != nil {
		return fmt.Errorf("removing the manifest of %s: %w", name, err)
	}
	a.mu.Lock()
	st := a.nc.State
	delete(a.reported, name)
	delete(a.shim, name)
	delete(a.deferredSince, name)
	delete(a.warned, name)
	delete(a.leases, name)
	// node-ctl serves this pool (by name, and by UID when known) and was not stopped yet.
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
	return nil
}

// noteDeferral tracks how long a downscale has been deferred and warns once past
// DeferredWarningAfter.
func (a *Agent) noteDeferral(pool *v1alpha1.SandboxPool, p resizePlan) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !p.Deferred {
		delete(a.deferredSince, pool.Name)
		delete(a.warned, pool.Name)
		return
	}
	since, ok := a.deferredSince[pool.Name]
	if !ok {
		a.deferredSince[pool.Name] = a.opts.Clock.Now()
		return
	}
	if d := a.opts.Clock.Since(since); d >= a.opts.DeferredWarningAfter && !a.warned[pool.Name] {
		a.warned[pool.Name] = true
		a.recorder.Eventf(pool, nil, corev1.EventTypeWarning, ReasonResizeDeferredLong, ActionResize,
			"Downscale deferred for %s: %s", d.Round(time.Second), p.Reason)
	}
}
