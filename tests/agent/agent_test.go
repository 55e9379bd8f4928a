package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

func condIs(p *v1alpha1.SandboxPool, typ string, s metav1.ConditionStatus) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	return c != nil && c.Status == s
}

func describe(p *v1alpha1.SandboxPool) string {
	var b strings.Builder
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s(%s: %s) ", c.Type, c.Status, c.Reason, c.Message)
	}
	if r := p.Status.Resize; r.Status != "" {
		fmt.Fprintf(&b, "resize=%s %q ", r.Status, r.DeferredReason)
	}
	return b.String()
}

// synced waits for the pool to run mem everywhere: node-ctl applied it, its manifests and
// its mirror pods request it in all, ResourceSynced=True, PlaceholderPodReady=True.
func synced(t *testing.T, n *testNode, pool, mem string) {
	t.Helper()
	want := resource.MustParse(mem)
	eventually(t, "pool synced at "+mem, 30*time.Second, func() (bool, string) {
		p := getPool(t, pool)
		st, err := n.nc.Client.State(context.Background())
		if err != nil {
			return false, err.Error()
		}
		onDisk, mirrors := diskLock(n, pool), mirrorLock(n)
		applied, perr := resource.ParseQuantity(st.AppliedResources["memory"])
		if perr != nil {
			return false, "node-ctl has applied nothing; " + describe(p)
		}
		return condIs(p, v1alpha1.ConditionResourceSynced.String(), metav1.ConditionTrue) && applied.Cmp(want) == 0 &&
				onDisk.Memory().Cmp(want) == 0 && mirrors.Memory().Cmp(want) == 0 &&
				condIs(p, v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionTrue) &&
				p.Status.PlaceholderPod != nil && p.Status.PlaceholderPod.Phase == corev1.PodRunning,
			fmt.Sprintf("node-ctl %s, manifests %s, mirror pods %s; %s", st.AppliedResources["memory"], memOf(onDisk), memOf(mirrors), describe(p))
	})
}

// invariantMonitor checks, every 5 ms until stopped, that the pool's lock is never below
// what node-ctl enforces: the sum of its manifests' requests (what the kubelet stand-in
// runs) and of its mirror pods' requests (what the scheduler counts). A missing pod counts
// as nothing. It also checks that the pool's resize never reads Completed for less memory
// than node-ctl enforces.
//
// It observes the step it watches from before it to after it: watchInvariant returns only
// once the monitor has taken a sample, before the test starts the step, and check waits
// until the monitor has taken one more after the step, instead of taking a last one itself.
// A monitor that took no sample on either side of the step fails.
type invariantMonitor struct {
	n    *testNode
	pool string
	// enforced reads what node-ctl enforces; false when it cannot be read (no sample).
	enforced func() (corev1.ResourceList, bool)
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex // guards the fields below
	samples  int
	// lastStart is when the last sample began.
	lastStart time.Time
	bad       []string
}

func watchInvariant(t *testing.T, n *testNode, pool string) *invariantMonitor {
	return watchEnforcement(t, n, pool, func() (corev1.ResourceList, bool) {
		st, err := n.nc.Client.State(context.Background())
		if err != nil {
			return nil, false
		}
		out := corev1.ResourceList{}
		for k, v := range st.AppliedResources {
			out[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return out, true
	})
}

// watchEnforcement starts a monitor that reads what node-ctl enforces with enforced, and
// returns once it has taken its first sample.
func watchEnforcement(t *testing.T, n *testNode, pool string, enforced func() (corev1.ResourceList, bool)) *invariantMonitor {
	t.Helper()
	m := &invariantMonitor{n: n, pool: pool, enforced: enforced, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(m.halt)
	eventually(t, "the invariant monitor's first sample", 30*time.Second, func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.samples > 0, "no sample yet"
	})
	return m
}

// sample reads the locks and the pool between two reads of what node-ctl enforces: a lock
// below both is below what node-ctl enforced when it was read, whichever read that was.
func (m *invariantMonitor) sample() {
	start := time.Now()
	before, ok := m.enforced()
	onDisk, mirrors := diskLock(m.n, m.pool), mirrorLock(m.n)
	var p v1alpha1.SandboxPool
	perr := admin.Get(context.Background(), types.NamespacedName{Name: m.pool}, &p)
	after, ok2 := m.enforced()
	if !ok || !ok2 || perr != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	m.lastStart = start
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		a, b := before[r], after[r]
		if b.Cmp(a) < 0 {
			a = b
		}
		for what, lock := range map[string]corev1.ResourceList{"manifests": onDisk, "mirror pods": mirrors} {
			if q := lock[r]; q.Cmp(a) < 0 {
				m.bad = append(m.bad, fmt.Sprintf("%s: %s request %s < node-ctl enforces %s", r, what, q.String(), a.String()))
			}
		}
		if rs := p.Status.Resize; r == corev1.ResourceMemory && rs.Status == v1alpha1.ResizeCompleted &&
			rs.RequestedMemory != nil && rs.RequestedMemory.Cmp(a) < 0 {
			m.bad = append(m.bad, fmt.Sprintf("the resize to %s reads Completed while node-ctl enforces %s", rs.RequestedMemory.String(), a.String()))
		}
	}
}

// halt stops the monitor and waits for it.
func (m *invariantMonitor) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// check waits until the monitor has taken a sample after the step (begun after check was
// called), stops it, and fails the test if it took none or any sample broke the invariant.
func (m *invariantMonitor) check(t *testing.T, step string) {
	t.Helper()
	end := time.Now()
	eventually(t, step+": the invariant monitor's sample after the step", 30*time.Second, func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.lastStart.After(end), fmt.Sprintf("%d samples, none since the step ended", m.samples)
	})
	m.halt()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bad) > 0 {
		t.Fatalf("%s: invariant broken in %d of %d samples, e.g. %s", step, len(m.bad), m.samples, m.bad[0])
	}
	t.Logf("%s: locks >= enforced in all %d samples", step, m.samples)
}

func setMemory(t *testing.T, pool, mem string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := getPool(t, pool)
		p.Spec.ResourcePolicy.Resources[corev1.ResourceMemory] = resource.MustParse(mem)
		return admin.Update(context.Background(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentLifecycle walks one node through the agent's whole job with a real node-ctl on
// real cgroups: the manifest and its content, node-ctl applied, status and Lease, quiet at
// rest, self-heal, resize up, safe down, deferred down under a real memory hog, node-ctl
// down and back, agent restart without a pod rebuild, and pool deletion.
func TestAgentLifecycle(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "agent-node-1")
	n.startAgent()
	kubelet := startKubelet(n)

	other := wrappers.MakePool("agent-node-2").Class("c1").Resources("500m", "64Mi").RuntimeClass("placeholder").Obj()
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	pool := wrappers.MakePool(n.name).Class("c1").Resources("500m", "64Mi").RuntimeClass("placeholder").Obj()
	pool.Spec.PlaceholderPod.PriorityClassName = "sandbox-high"
	pool.Spec.PlaceholderPod.Priority = ptr.To[int32](1000)
	if err := admin.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, pool); _ = admin.Delete(ctx, other) })

	// The manifest, with the pool's identity and request; nothing for the other node. From
	// the first placeholder pod on, node-ctl never runs more than the pods request.
	m := watchInvariant(t, n, pool.Name)
	synced(t, n, pool.Name, "64Mi")
	m.check(t, "the pool's first lock")
	pool = getPool(t, pool.Name)
	files := pieceFiles(n, pool.Name)
	if len(files) != 1 || files[0].Piece != 1 {
		t.Fatalf("manifests %v, want one, piece 1", files)
	}
	file, data := files[0].Path, files[0].Data
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		v1alpha1.AnnotationPoolName: pool.Name, v1alpha1.AnnotationPoolUID: string(pool.UID), v1alpha1.AnnotationSkipCgroup: "true",
	} {
		if pod.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, pod.Annotations[k], want)
		}
	}
	if pod.Labels[v1alpha1.LabelClass] != "c1" || pod.Labels[v1alpha1.LabelNode] != n.name || pod.Labels[v1alpha1.LabelPoolName] != naming.LabelValue(pool.Name) {
		t.Errorf("labels %v", pod.Labels)
	}
	if !pod.Spec.HostNetwork || ptr.Deref(pod.Spec.RuntimeClassName, "") != "placeholder" || ptr.Deref(pod.Spec.Priority, 0) != 1000 ||
		pod.Spec.PriorityClassName != "sandbox-high" || pod.Spec.Containers[0].Image != "registry.test/pause:1" {
		t.Errorf("pod spec %+v", pod.Spec)
	}
	if files[0].Verify() != nil {
		t.Errorf("manifest hash does not verify: %v", files[0].Verify())
	}
	if entries, _ := os.ReadDir(n.manifestDir); len(entries) != 1 {
		t.Errorf("manifest dir has %d files, want only this node's pool", len(entries))
	}

	// Status: node-ctl, pool info, the agent; and the Lease is renewed.
	p := getPool(t, pool.Name)
	if p.Status.PoolInfo == nil || p.Status.PoolInfo.Zone != "z1" || ptr.Deref(p.Status.PoolInfo.AllocatableMemoryBytes, 0) != 64<<20 ||
		p.Status.NodeCtl == nil || !ptr.Deref(p.Status.NodeCtl.Connected, false) || ptr.Deref(p.Status.LastAppliedGeneration, 0) != p.Generation ||
		p.Status.PlaceholderAgent == nil || p.Status.PlaceholderAgent.Version != "test" || p.Status.PlaceholderPod == nil ||
		p.Status.PlaceholderPod.Name != "sandbox-pool-1-"+n.name {
		t.Errorf("status: %+v", p.Status)
	}
	if p.Status.Resize.Status != "" {
		t.Errorf("the first apply is not a resize: %+v", p.Status.Resize)
	}
	var lease coordinationv1.Lease
	leaseKey := types.NamespacedName{Namespace: v1alpha1.DefaultLeaseNamespace, Name: pool.Name}
	if err := admin.Get(ctx, leaseKey, &lease); err != nil {
		t.Fatalf("no lease: %v", err)
	}
	first := lease.Spec.RenewTime.Time
	eventually(t, "the lease is renewed", 5*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, leaseKey, &lease)
		return lease.Spec.RenewTime.After(first) && ptr.Deref(lease.Spec.HolderIdentity, "") == n.name, lease.Spec.RenewTime.String()
	})

	// At rest: polls every 200 ms and renewals every second write no status.
	rv := getPool(t, pool.Name).ResourceVersion
	time.Sleep(2 * time.Second) // the window under observation, not a synchronisation
	if now := getPool(t, pool.Name); now.ResourceVersion != rv {
		t.Errorf("the pool was written at rest: %s → %s; %s", rv, now.ResourceVersion, describe(now))
	}

	// Self-heal: a deleted manifest's part of the lock is restored by a new placeholder pod;
	// an edited one is replaced by a new pod of the agent's. (Taking a manifest away drops the
	// lock until the agent restores it: no invariant to watch here.)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted manifest's lock restored", 10*time.Second, func() (bool, string) {
		files := pieceFiles(n, pool.Name)
		return len(files) == 1 && files[0].Path != file && memOf(files[0].Resources) == "64Mi" && memOf(mirrorLock(n)) == "64Mi",
			fmt.Sprintf("%d manifests, mirror pods %s", len(files), memOf(mirrorLock(n)))
	})
	synced(t, n, pool.Name, "64Mi")
	edited := pieceFiles(n, pool.Name)[0]
	if err := os.WriteFile(edited.Path, append(bytes.Clone(edited.Data), []byte("# edited\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "edited manifest replaced", 10*time.Second, func() (bool, string) {
		files := pieceFiles(n, pool.Name)
		return len(files) == 1 && files[0].Path != edited.Path && files[0].Verify() == nil, fmt.Sprintf("%d manifests", len(files))
	})
	synced(t, n, pool.Name, "64Mi")

	// Resize up, then a safe downscale, the invariant watched throughout.
	m = watchInvariant(t, n, pool.Name)
	setMemory(t, pool.Name, "128Mi")
	synced(t, n, pool.Name, "128Mi")
	m.check(t, "scale up 64Mi → 128Mi")
	if r := getPool(t, pool.Name).Status.Resize; r.Status != v1alpha1.ResizeCompleted || r.RequestedMemory.String() != "128Mi" {
		t.Errorf("resize status after scale-up: %+v", r)
	}
	m = watchInvariant(t, n, pool.Name)
	setMemory(t, pool.Name, "96Mi")
	synced(t, n, pool.Name, "96Mi")
	m.check(t, "safe scale down 128Mi → 96Mi")

	// Unsafe downscale: a real process uses 70 MiB of the node-ctl cgroup; 64Mi × 85 % is
	// 54 MiB, so the downscale is deferred, the old request kept, and it completes by
	// itself once the memory is freed.
	hog := nodectltest.StartHog(t, n.nc.CgroupPath, 70)
	if err := hog.WaitAllocated(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node-ctl sees the hog", 10*time.Second, func() (bool, string) {
		st, err := n.nc.Client.State(ctx)
		return err == nil && st.AllocatedMemoryBytes > 60<<20, fmt.Sprint(err)
	})
	m = watchInvariant(t, n, pool.Name)
	setMemory(t, pool.Name, "64Mi")
	eventually(t, "downscale deferred", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		r := p.Status.Resize
		return r.Status == v1alpha1.ResizeDeferred && strings.Contains(r.DeferredReason, "85%") &&
			condIs(p, v1alpha1.ConditionResizeDeferred.String(), metav1.ConditionTrue) &&
			condIs(p, v1alpha1.ConditionResourceSynced.String(), metav1.ConditionFalse), describe(p)
	})
	if onDisk, mirrors := diskLock(n, pool.Name), mirrorLock(n); memOf(onDisk) != "96Mi" || memOf(mirrors) != "96Mi" {
		t.Errorf("the deferred downscale changed the lock: manifests %s, mirror pods %s", memOf(onDisk), memOf(mirrors))
	}
	eventually(t, "a Warning event once deferred longer than 2 s", 10*time.Second, func() (bool, string) {
		var evs eventsv1.EventList
		_ = admin.List(ctx, &evs)
		for _, e := range evs.Items {
			if e.Regarding.Name == pool.Name && e.Reason == "ResizeDeferredTooLong" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	hog.Release()
	synced(t, n, pool.Name, "64Mi")
	m.check(t, "deferred scale down 96Mi → 64Mi")

	// node-ctl down: NodeCtlHealthy=False with downSince; back: healthy and re-applied.
	n.nc.Kill()
	eventually(t, "NodeCtlHealthy=False with downSince", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		return condIs(p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionFalse) && p.Status.NodeCtl != nil &&
			p.Status.NodeCtl.DownSince != nil && !ptr.Deref(p.Status.NodeCtl.Connected, true), describe(p)
	})
	n.nc.Start()
	eventually(t, "NodeCtlHealthy=True again", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		return condIs(p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionTrue) && p.Status.NodeCtl.DownSince == nil, describe(p)
	})
	synced(t, n, pool.Name, "64Mi")

	// Agent restart with an unchanged pool: the same files, not even rewritten, so kubelet
	// has nothing to rebuild.
	before := diskState(n, pool.Name)
	stats := map[string]time.Time{}
	for path := range before {
		fi, _ := os.Stat(path)
		stats[path] = fi.ModTime()
	}
	creates := kubelet.Creates()
	n.stopAgent()
	n.startAgent()
	passes := reconcileCount(t)
	eventually(t, "the restarted agent renews the lease", 10*time.Second, func() (bool, string) {
		var l coordinationv1.Lease
		_ = admin.Get(ctx, leaseKey, &l)
		return l.Spec.RenewTime.After(time.Now().Add(-500 * time.Millisecond)), l.Spec.RenewTime.String()
	})
	// The restarted agent's first passes, and those of two verify periods (1 s here), ran.
	eventually(t, "the restarted agent's passes and two verify periods", 10*time.Second, func() (bool, string) {
		n := reconcileCount(t)
		return n >= passes+3, fmt.Sprintf("%v passes since the restart", n-passes)
	})
	touched := !maps.Equal(before, diskState(n, pool.Name))
	for path, mtime := range stats {
		if fi, err := os.Stat(path); err != nil || !fi.ModTime().Equal(mtime) {
			touched = true
		}
	}
	if touched || kubelet.Creates() != creates {
		t.Errorf("agent restart touched the manifests or rebuilt a pod: touched %v, creates %d → %d", touched, creates, kubelet.Creates())
	}
	if _, err := os.Stat(n.stopMarker); err == nil {
		t.Errorf("node-ctl was stopped although the pool exists (resizes rebuilt the pod %d times)", kubelet.Creates())
	}

	// Pool deleted: the manifest goes, the pod goes, node-ctl is stopped (with its PID).
	pid := n.nc.Pid()
	if err := admin.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "manifests removed, pods gone, node-ctl stopped", 10*time.Second, func() (bool, string) {
		marker, _ := os.ReadFile(n.stopMarker)
		return len(pieceFiles(n, pool.Name)) == 0 && len(mirrorPods(n)) == 0 && strings.TrimSpace(string(marker)) == strconv.Itoa(pid),
			fmt.Sprintf("%d manifests, %d mirror pods, marker %q", len(pieceFiles(n, pool.Name)), len(mirrorPods(n)), marker)
	})
}
