package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/agent"
	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestOnlyTheNodesOwnLockCounts: pods anyone can create that carry a piece's name, labels,
// annotations (the real mirror pod's, copied) and the placeholder RuntimeClass — in another
// namespace, or in the placeholder pods' namespace without being a mirror pod — and sandboxes
// the shim reports for such pods, steer nothing. Piece numbering goes on past a pod named
// with the largest number there is; a resize completes; the pool stays Ready while such pods
// pose as its running piece; and once the real mirror pod is gone the pool is not Ready
// however many of them run. The pods are created as the cluster's admin with any admission
// policy that refuses them set aside: the agent must hold on its own.
func TestOnlyTheNodesOwnLockCounts(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "tenant-node")
	n.startAgent()
	kubelet := startKubelet(n)
	pool := syncedPool(t, n)
	mirrors := mirrorPods(n)
	if len(mirrors) != 1 {
		t.Fatalf("%d mirror pods, want 1", len(mirrors))
	}
	mirror := mirrors[0]

	createNamespace(t, "tenant")
	pose := func(namespace, name string, mirrorAnnotations bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: mirror.Labels, Annotations: map[string]string{}}}
		for k, v := range mirror.Annotations {
			if mirrorAnnotations || !strings.HasPrefix(k, "kubernetes.io/config.") {
				p.Annotations[k] = v
			}
		}
		p.Spec = corev1.PodSpec{NodeName: n.name, RuntimeClassName: ptr.To("placeholder"),
			Containers: []corev1.Container{{Name: "placeholder", Image: "registry.test/pause:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}
		createSettingPoliciesAside(t, p)
		// Running and Ready, as a pod kubelet runs would read.
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if err := admin.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The largest piece number there is, the name of the running piece, and the name of
	// the next piece in the placeholder pods' namespace.
	pose("tenant", "sandbox-pool-4294967295-"+n.name, true)
	pose("tenant", mirror.Name, true)
	pose(v1alpha1.DefaultPodNamespace, "sandbox-pool-999999-"+n.name, false)

	// The shim API: sandboxes of those pods are refused, and their stops change nothing.
	own := kubelet.identity(&mirror)
	for what, id := range map[string]*v1.Identity{
		"in another namespace":      withID(own, func(id *v1.Identity) { id.PodNamespace = "tenant"; id.PodUid = "0b7f0000-0000-0000-0000-000000000001" }),
		"with another UID":          withID(own, func(id *v1.Identity) { id.PodUid = "0b7f0000-0000-0000-0000-000000000002" }),
		"named as no piece of ours": withID(own, func(id *v1.Identity) { id.PodName = "sandbox-pool-999999-" + n.name }),
	} {
		c, err := shimapi.Dial(ctx, n.shimAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, &v1.CreateRequest{Identity: id}); err == nil {
			t.Errorf("the agent accepted the sandbox of a pod %s", what)
		}
		if _, err := c.Start(ctx, &v1.StartRequest{Identity: id, ShimPid: 1}); err == nil {
			t.Errorf("the agent accepted the start of a pod %s", what)
		}
		if _, err := c.Delete(ctx, &v1.DeleteRequest{Identity: id}); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}

	// A growth numbers its piece as if none of those pods were there, and completes: the
	// pool stays Ready with the stops of the posing sandboxes reported (synced checks it).
	m := watchInvariant(t, n, pool.Name)
	setMemory(t, pool.Name, "96Mi")
	synced(t, n, pool.Name, "96Mi")
	m.check(t, "scale up 64Mi → 96Mi beside pods posing as pieces")
	for _, f := range pieceFiles(n, pool.Name) {
		if f.Piece > 3 {
			t.Errorf("piece %d: the numbering followed a pod someone else named", f.Piece)
		}
	}

	// The real mirror pods gone (deleted; the stand-in, unlike kubelet, does not create them
	// again): the scheduler does not count the lock, and the pool is not Ready.
	for _, p := range mirrorPods(n) {
		if p.Annotations[manifest.AnnotationConfigMirror] != "" {
			mirror = p
			kubelet.dropMirror(t, p.Name)
		}
	}
	missing := func(step string) {
		t.Helper()
		eventually(t, step+": PlaceholderPodReady=False, MirrorPodMissing", 10*time.Second, func() (bool, string) {
			p := getPool(t, pool.Name)
			c := conditionOf(p, v1alpha1.ConditionPlaceholderPodReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonMirrorPodMissing.String(), describe(p)
		})
	}
	missing("the mirror pod deleted")
	// kubelet creates a mirror pod again with no status until its next status sync: the pool
	// is Ready as soon as the scheduler counts the pod again, which the shim says runs.
	kubelet.restoreMirrors(t)
	eventually(t, "PlaceholderPodReady=True while the mirror pod has no status yet", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		for _, m := range mirrorPods(n) {
			if m.Annotations[manifest.AnnotationConfigMirror] != "" && m.Status.Phase == corev1.PodRunning {
				t.Fatalf("mirror pod %s got a status: the test no longer shows what it means to", m.Name)
			}
		}
		return condIs(p, v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionTrue), describe(p)
	})

	// Pods posing as it, with all its labels and annotations in another namespace, or its
	// name, labels and pool annotations in its namespace without being a mirror pod, do not
	// stand in for it: not even for an agent that starts with them there and hears from the
	// shim (which repeats its Start to a restarted agent) that the piece runs.
	kubelet.dropMirror(t, mirror.Name)
	missing("the mirror pod deleted again")
	pose("tenant", mirror.Name, true)
	pose(v1alpha1.DefaultPodNamespace, mirror.Name, false)
	n.stopAgent()
	writes := statusWriteCount(t)
	n.startAgent()
	// The restarted agent's first status, from a pass with its caches synced: the pods
	// posing as the mirror pod were there.
	eventually(t, "the restarted agent's first status", 10*time.Second, func() (bool, string) {
		return statusWriteCount(t) > writes, "no status written yet"
	})
	if p := getPool(t, pool.Name); !condIs(p, v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionFalse) {
		t.Fatalf("a restarted agent took a pod posing as the mirror pod for it: %s", describe(p))
	}
	replayStart(t, n, kubelet.identity(&mirror))
	missing("an agent restarted beside pods posing as the mirror pod")
}

// replayStart tells the agent, as the shim does when it finds the agent restarted, that the
// pod of id runs; it retries until the agent's shim API serves.
func replayStart(t *testing.T, n *testNode, id *v1.Identity) {
	t.Helper()
	eventually(t, "the shim's Start repeated to the agent", 10*time.Second, func() (bool, string) {
		ctx := context.Background()
		c, err := shimapi.Dial(ctx, n.shimAddr)
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		_, err = c.Start(ctx, &v1.StartRequest{Identity: id, ShimPid: uint32(os.Getpid())})
		return err == nil, fmt.Sprint(err)
	})
}

// withID is a copy of id changed by change.
func withID(id *v1.Identity, change func(*v1.Identity)) *v1.Identity {
	c := &v1.Identity{Namespace: id.Namespace, ContainerId: id.ContainerId, SandboxId: id.SandboxId, Sandbox: id.Sandbox,
		PodName: id.PodName, PodNamespace: id.PodNamespace, PodUid: id.PodUid, PoolName: id.PoolName, PoolUid: id.PoolUid}
	change(c)
	return c
}

func conditionOf(p *v1alpha1.SandboxPool, typ v1alpha1.ConditionType) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ.String() {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// policyDenial is how the API server names the binding of a ValidatingAdmissionPolicy that
// refused a request.
var policyDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '[^']*' with binding '([^']*)' denied request`)

// createSettingPoliciesAside creates obj as the cluster's admin. A ValidatingAdmissionPolicy
// that refuses it (the cluster's defence, which the agent's must not depend on) has its
// binding deleted for the rest of the test, and put back at its end.
func createSettingPoliciesAside(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	err := admin.Create(ctx, obj)
	for range 5 {
		m := policyDenial.FindStringSubmatch(fmt.Sprint(err))
		if err == nil || m == nil {
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = admin.Delete(ctx, obj, client.GracePeriodSeconds(0)) })
			return
		}
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := admin.Get(ctx, types.NamespacedName{Name: m[1]}, &b); err != nil {
			t.Fatal(err)
		}
		t.Logf("setting admission policy binding %s aside: %v", b.Name, err)
		if err := admin.Delete(ctx, &b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			b.ResourceVersion, b.UID = "", ""
			if err := admin.Create(ctx, &b); err != nil {
				t.Errorf("putting admission policy binding %s back: %v", b.Name, err)
			}
		})
		// The API server applies a binding's removal once its informer has seen it.
		eventually(t, "the API server without binding "+b.Name, 10*time.Second, func() (bool, string) {
			err = admin.Create(ctx, obj)
			again := policyDenial.FindStringSubmatch(fmt.Sprint(err))
			return again == nil || again[1] != b.Name, fmt.Sprint(err)
		})
	}
	t.Fatalf("creating %s: still refused by an admission policy", obj.GetName())
}

// TestUnrunnablePiece: a piece kubelet never runs (its RuntimeClass does not exist: kubelet
// cannot run it and the API server refuses its mirror pod) is reported within
// --piece-start-timeout as PodUnrunnable (ResourceSynced=False, no resize in progress: the
// controller's phase is Degraded), removed without touching the pieces that run, tried
// again after a backoff; a resize meanwhile is tried too; and reverting the spec recovers.
// Neither count of the lock falls below what node-ctl runs at any time.
func TestUnrunnablePiece(t *testing.T) {
	n := newNode(t, "unrunnable-node")
	n.startAgent(func(o *agent.Options) { o.PieceStartTimeout = 3 * time.Second })
	startKubelet(n)
	pool := syncedPool(t, n)

	m := watchInvariant(t, n, pool.Name)
	setRuntimeClass(t, pool.Name, "probe-missing")
	unrunnable := func(step string) {
		t.Helper()
		eventually(t, step+": reported unrunnable", 30*time.Second, func() (bool, string) {
			p := getPool(t, pool.Name)
			c := conditionOf(p, v1alpha1.ConditionResourceSynced)
			return c != nil && c.Reason == v1alpha1.ReasonPodUnrunnable.String() && strings.Contains(c.Message, "within 3s") &&
				condIs(p, v1alpha1.ConditionResizeInProgress.String(), metav1.ConditionFalse) &&
				condIs(p, v1alpha1.ConditionResizeDeferred.String(), metav1.ConditionFalse) &&
				condIs(p, v1alpha1.ConditionPlaceholderPodReady.String(), metav1.ConditionTrue), describe(p)
		})
	}
	unrunnable("a template kubelet cannot run")
	// The unrunnable piece goes: the manifests hold what the running pieces hold.
	eventually(t, "the unrunnable piece removed", 30*time.Second, func() (bool, string) {
		return memOf(diskLock(n, pool.Name)) == "64Mi", fmt.Sprintf("manifests %s", memOf(diskLock(n, pool.Name)))
	})
	// A resize meanwhile is tried with the template it has, and reported the same way.
	setMemory(t, pool.Name, "96Mi")
	unrunnable("a growth with a template kubelet cannot run")
	m.check(t, "pieces kubelet cannot run")

	m = watchInvariant(t, n, pool.Name)
	setRuntimeClass(t, pool.Name, "placeholder")
	synced(t, n, pool.Name, "96Mi")
	m.check(t, "the spec reverted, the growth done")
}

func setRuntimeClass(t *testing.T, pool, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := getPool(t, pool)
		p.Spec.PlaceholderPod.RuntimeClassName = name
		return admin.Update(context.Background(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNodeCtlUnknownIsNotZero: with node-ctl stopped (SIGSTOP: its socket takes
// connections, nothing answers) a shrink is asked and the agent restarts. The restarted
// agent takes node-ctl to enforce what it last reported — what its cgroup does enforce —
// and keeps the lock at that; the resize is never Completed before node-ctl applied it.
// Once node-ctl answers again the shrink goes through in order: node-ctl first, then the
// lock.
func TestNodeCtlUnknownIsNotZero(t *testing.T) {
	n := newNode(t, "silent-node-ctl")
	restarts := n.stopMarker + ".restart"
	withRestartMarker := func(o *agent.Options) { o.NodeCtlRestartCommand = "echo $NODECTL_PID >> " + restarts }
	n.startAgent(withRestartMarker)
	startKubelet(n)
	pool := syncedPool(t, n)
	limit := func() int64 { return nodectltest.ReadKernelLimits(t, n.nc.CgroupPath).MemoryBytes }
	if limit() != 64<<20 {
		t.Fatalf("node-ctl's cgroup limits memory to %d, want 64Mi", limit())
	}

	// node-ctl cannot say what it enforces while it is stopped: its cgroup can.
	m := watchEnforcement(t, n, pool.Name, func() (corev1.ResourceList, bool) {
		mem, err := memoryLimit(n.nc.CgroupPath)
		if err != nil {
			return nil, false
		}
		return corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI)}, true
	})
	n.nc.Signal(syscall.SIGSTOP)
	continued := false
	t.Cleanup(func() {
		if !continued {
			n.nc.Signal(syscall.SIGCONT)
		}
	})
	eventually(t, "the agent sees node-ctl not answering", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		return condIs(p, v1alpha1.ConditionNodeCtlHealthy.String(), metav1.ConditionFalse), describe(p)
	})
	setMemory(t, pool.Name, "48Mi")
	n.stopAgent()
	before := fileHasLines(restarts)
	n.startAgent(withRestartMarker)
	// The restarted agent has decided in a pass that node-ctl must shrink and that it does not
	// answer: it ran the restart command (recorded, not run).
	eventually(t, "the restarted agent tries to restart node-ctl", 10*time.Second, func() (bool, string) {
		return fileHasLines(restarts) > before, "no restart recorded"
	})
	eventually(t, "the resize reported in progress", 10*time.Second, func() (bool, string) {
		p := getPool(t, pool.Name)
		r := p.Status.Resize
		return r.Status == v1alpha1.ResizeInProgress && r.RequestedMemory.String() == "48Mi", describe(p)
	})
	if onDisk, mirrors := diskLock(n, pool.Name), mirrorLock(n); memOf(onDisk) != "64Mi" || memOf(mirrors) != "64Mi" {
		t.Errorf("with node-ctl silent the lock moved: manifests %s, mirror pods %s (its cgroup enforces %d)", memOf(onDisk), memOf(mirrors), limit())
	}

	n.nc.Signal(syscall.SIGCONT)
	continued = true
	synced(t, n, pool.Name, "48Mi")
	m.check(t, "a shrink asked while node-ctl was silent, across an agent restart")
	if r := getPool(t, pool.Name).Status.Resize; r.Status != v1alpha1.ResizeCompleted {
		t.Errorf("resize %+v, want Completed", r)
	}
}

// fileHasLines counts the lines of the file at path (0 when it does not exist).
func fileHasLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// dropMirror deletes the mirror pod called name, as someone with the right to may; the
// stand-in, unlike kubelet, does not create it again until restoreMirrors.
func (k *kubeletStandIn) dropMirror(t *testing.T, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultPodNamespace, Name: name}}
	if err := admin.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropped = append(k.dropped, name)
}

// restoreMirrors creates the dropped mirror pods again, as kubelet does on its next sync of
// the pods: from the static pod, with no status (kubelet's status sync writes that later).
func (k *kubeletStandIn) restoreMirrors(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	dropped := k.dropped
	k.dropped = nil
	k.mu.Unlock()
	ctx := context.Background()
	for _, name := range dropped {
		files, _ := manifest.List(k.n.manifestDir)
		for _, f := range files {
			if manifest.PodName(f.Piece)+"-"+k.n.name != name {
				continue
			}
			var static corev1.Pod
			if err := yaml.Unmarshal(f.Data, &static); err != nil {
				t.Fatal(err)
			}
			m := static.DeepCopy()
			m.Name, m.UID, m.Spec.NodeName = name, "", k.n.name
			m.Annotations[manifest.AnnotationConfigMirror] = string(static.UID)
			m.Annotations[manifest.AnnotationConfigSource] = manifest.ConfigSourceFile
			if err := admin.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
			k.mu.Lock()
			for file, r := range k.running {
				if r.hash == f.Hash {
					k.running[file] = running{hash: r.hash, uid: m.UID}
				}
			}
			k.mu.Unlock()
		}
	}
}

// memoryLimit is the memory limit of the cgroup at path as the kernel's file says (0 when
// unlimited), read without failing a test: the monitor's goroutine calls it.
func memoryLimit(path string) (int64, error) {
	file := filepath.Join("/sys/fs/cgroup", path, "memory.max")
	if cgroups.Mode() != cgroups.Unified {
		file = filepath.Join("/sys/fs/cgroup", "memory", path, "memory.limit_in_bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n >= 1<<62 {
		return 0, err
	}
	return n, nil
}
