package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestSandboxesPosingAsThePoolRefused: sandboxes run on the placeholder runtime straight
// through CRI, as kubelet would run any pod that names the placeholder RuntimeClass — named
// as the pool's running piece, carrying the pool's name and UID — are refused by the agent
// (RunPodSandbox fails with its reason) unless they are the static pod of a manifest it
// wrote: in another namespace, or in the placeholder pods' namespace with another pod UID.
// The pool's running piece is not touched: the pool stays Ready throughout.
func TestSandboxesPosingAsThePoolRefused(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	piece := mirrorPod(t)
	pool := getPool(t)
	w := watchLock(t, wrappers.Resources(baseCPU, baseMemory), wrappers.Resources(baseCPU, baseMemory))
	for _, tc := range []struct{ namespace, want string }{
		{metav1.NamespaceDefault, "is not in the placeholder pods' namespace"},
		{v1alpha1.DefaultPodNamespace, "is not the static pod of"},
	} {
		uid := string(uuid.NewUUID())
		cfg := map[string]any{
			"metadata":      map[string]any{"name": piece.Name, "namespace": tc.namespace, "uid": uid},
			"annotations":   map[string]string{v1alpha1.AnnotationPoolName: pool.Name, v1alpha1.AnnotationPoolUID: string(pool.UID)},
			"log_directory": filepath.Join(t.TempDir(), "logs"),
			"linux":         map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}}},
		}
		file := filepath.Join(t.TempDir(), "pod.json")
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := s.Crictl(context.Background(), "runp", "--runtime", "placeholder", file)
		if err == nil {
			id := strings.TrimSpace(out)
			t.Cleanup(func() {
				_, _ = s.Crictl(context.Background(), "stopp", id)
				_, _ = s.Crictl(context.Background(), "rmp", id)
			})
			t.Errorf("a sandbox of %s/%s posing as the pool's piece runs: %s", tc.namespace, piece.Name, id)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("the sandbox of %s/%s was refused, but not by the agent for what it is (want %q): %v", tc.namespace, piece.Name, tc.want, err)
		}
	}
	r := w.check("sandboxes posing as the pool's piece")
	if v := r.view(viewReady); v.bad > 0 {
		t.Errorf("the pool left Ready while sandboxes posed as its piece: %d readings, longest %s", v.bad, v.gap)
	}
	if now := mirrorPod(t); now == nil || now.UID != piece.UID || !podReady(now) {
		t.Errorf("the pool's piece changed: %s", podState(now))
	}
}

// nodeClient is the node's own identity (kubelet's), system:node:<node>.
func nodeClient(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", suite.s.InstallVars()["KUBELET_KUBECONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUnrunnablePieceRemovedAndRecovered: the class names RuntimeClass e2e-probe, which runs
// the placeholder handler (admission checks that), and the pool runs. Then e2e-probe is
// replaced by one whose handler this node's containerd does not have, and the class grows:
// kubelet admits the growth's piece, counts it, and cannot run its sandbox. Within
// --piece-start-timeout (20 s here) the pool is Degraded with ResourceSynced=False, reason
// PodUnrunnable, the piece is removed — kubelet's and the scheduler's counts are back to what
// the running piece holds, which node-ctl runs, and neither was ever below it — and a revert of
// the class's RuntimeClass completes the growth with no hand on the node.
func TestUnrunnablePieceRemovedAndRecovered(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	ctx := context.Background()
	const probe = "e2e-probe"
	createRuntimeClass := func(handler string) {
		t.Helper()
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: probe}, Handler: handler}
		if _, err := kube.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleteRuntimeClass := func() {
		err := kube.NodeV1().RuntimeClasses().Delete(ctx, probe, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		eventually(t, "RuntimeClass "+probe+" gone", 30*time.Second, func() (bool, string) {
			_, err := kube.NodeV1().RuntimeClasses().Get(ctx, probe, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	t.Cleanup(func() {
		setClassRuntimeClass(t, "")
		ensureClass(t)
		deleteRuntimeClass()
	})
	createRuntimeClass("placeholder")
	setClassRuntimeClass(t, probe)
	eventually(t, "the pool runs on RuntimeClass "+probe, 2*time.Minute, func() (bool, string) {
		pods := mirrorPods(t)
		return len(pods) == 1 && ptr.Deref(pods[0].Spec.RuntimeClassName, "") == probe && podReady(&pods[0]), fmt.Sprintf("%d mirror pods", len(pods))
	})
	waitSynced(t, baseCPU, baseMemory, time.Minute)

	deleteRuntimeClass()
	createRuntimeClass("probe-missing")
	up := wrappers.Resources("600m", baseMemory)
	w := watchLock(t, wrappers.Resources(baseCPU, baseMemory), wrappers.Resources(baseCPU, baseMemory))
	t0 := time.Now()
	setClassResources(t, up)
	took := waitPhase(t, v1alpha1.PhaseDegraded, time.Minute, func(p *v1alpha1.SandboxPool) bool {
		c := condOf(p, v1alpha1.ConditionResourceSynced.String())
		return c != nil && c.Reason == v1alpha1.ReasonPodUnrunnable.String()
	})
	t.Logf("growth with a handler the node lacks: Degraded (PodUnrunnable) %s after the class changed (--piece-start-timeout %s): %q",
		took.Round(time.Millisecond), suiteTimers().PieceStartTimeout, condOf(getPool(t), v1alpha1.ConditionResourceSynced.String()).Message)
	if took < suiteTimers().PieceStartTimeout {
		t.Errorf("reported unrunnable %s after the growth, before --piece-start-timeout %s", took, suiteTimers().PieceStartTimeout)
	}
	eventually(t, "the unrunnable piece removed: kubelet and the scheduler count the running piece", time.Minute, func() (bool, string) {
		kl, err := kubeletLock(ctx)
		sched := schedulerLock(t)
		want := wrappers.Resources(baseCPU, baseMemory)
		return err == nil && equalLists(kl, want) && equalLists(sched, want), fmt.Sprintf("kubelet %v (%v), scheduler %v", kl, err, sched)
	})
	r := w.check(fmt.Sprintf("a growth kubelet cannot run, reported and removed (%s)", time.Since(t0).Round(time.Millisecond)))
	if v := r.view(viewReady); v.bad == 0 {
		t.Errorf("the pool never left Ready although a growth could not be done")
	}

	w = watchLock(t, wrappers.Resources(baseCPU, baseMemory), up)
	setClassRuntimeClass(t, "")
	waitSynced(t, "600m", baseMemory, 2*time.Minute)
	w.check("the class's RuntimeClass reverted: the growth completes")
}

// setClassRuntimeClass sets the suite class's placeholder pods' RuntimeClass ("": the
// schema's default, which the API server fills in).
func setClassRuntimeClass(t testing.TB, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c v1alpha1.SandboxPoolClass
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: className}, &c); err != nil {
			return err
		}
		c.Spec.PlaceholderPod.RuntimeClassName = name
		return k8s.Update(context.Background(), &c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// schedulerLock is the pool's lock as the scheduler counts it: the requests of its mirror
// pods that have not finished (those being deleted included).
func schedulerLock(t testing.TB) corev1.ResourceList {
	t.Helper()
	pods, err := poolPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	return support.Requests(live...)
}

// TestGrowthNeverEvicts races, three times, the scheduler's bind of a regular pod against a
// growth of the pool into the same room: the pod asks for all the free cpu but 100m, the
// growth for 200m, so the node holds one of them, not both. Whatever the order, the growth
// evicts no pod: the agent sends a growth to kubelet only when the scheduler's view of the
// node has room for it (without --resize-preempt), so either the pod runs and the growth
// waits (Deferred, InsufficientRoom) until the pod goes, or the growth's piece is counted and
// the pod is not placed, or — bound in the instant between — refused by kubelet at admission
// before it ever ran. Never is a pod preempted.
func TestGrowthNeverEvicts(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	ctx := context.Background()
	for round, order := range []string{"pod first", "growth first", "together"} {
		free := free(t)[corev1.ResourceCPU]
		podCPU := free.DeepCopy()
		podCPU.Sub(resource.MustParse("100m"))
		if podCPU.Sign() <= 0 {
			t.Fatalf("the node has only %s cpu free", free.String())
		}
		name := fmt.Sprintf("racer-%d", round)
		pod := regularPod(name, corev1.ResourceList{corev1.ResourceCPU: podCPU, corev1.ResourceMemory: resource.MustParse("16Mi")})
		pod.Spec.NodeName = "" // the scheduler places it
		seen := watchPod(t, metav1.NamespaceDefault, name)
		grow := func() { setClassResources(t, wrappers.Resources("700m", baseMemory)) }
		create := func() {
			if _, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}
		switch order {
		case "pod first":
			create()
			grow()
		case "growth first":
			grow()
			create()
		default:
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); create() }()
			go func() { defer wg.Done(); grow() }()
			wg.Wait()
		}
		// Settled: the pod runs and the growth waits for room, or the growth is done and the
		// pod does not run.
		var outcome string
		eventually(t, order+": the race settled", 2*time.Minute, func() (bool, string) {
			p, g := getPod(t, metav1.NamespaceDefault, name), getPool(t)
			switch {
			case p != nil && podReady(p) && g != nil && g.Status.Resize != nil && g.Status.Resize.Status == v1alpha1.ResizeDeferred &&
				condOf(g, v1alpha1.ConditionResizeDeferred.String()).Reason == v1alpha1.ReasonInsufficientRoom.String():
				outcome = "the pod runs, the growth waits for room"
			case p != nil && !podReady(p) && g != nil && g.Status.Resize != nil && g.Status.Resize.Status == v1alpha1.ResizeCompleted &&
				g.Status.Resize.RequestedCPU.Cmp(resource.MustParse("700m")) == 0:
				outcome = "the growth is done, the pod " + podState(p)
			}
			return outcome != "", fmt.Sprintf("pod %s; %s", podState(p), describe(g))
		})
		deletePodNow(t, metav1.NamespaceDefault, name)
		waitSynced(t, "700m", baseMemory, 2*time.Minute)
		history := seen()
		t.Logf("%s: %s; the pod went %s", order, outcome, strings.Join(history.phases, " → "))
		if history.evicted != "" {
			t.Errorf("%s: the growth evicted pod %s: %s", order, name, history.evicted)
		}
		setClassResources(t, wrappers.Resources(baseCPU, baseMemory))
		waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	}
}

// podHistory is what a watch saw of a pod: its phases in order, and how it was evicted, if
// it was (kubelet's preemption of a pod for a critical one: Failed with reason Preempting;
// an eviction: reason Evicted).
type podHistory struct {
	phases  []string
	evicted string
}

// watchPod watches the pod called name from now on; the returned function stops the watch
// and returns what it saw.
func watchPod(t testing.TB, namespace, name string) func() podHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var h podHistory
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			phase := string(p.Status.Phase)
			if podReady(p) {
				phase += "(ready)"
			}
			if n := len(h.phases); n == 0 || h.phases[n-1] != phase {
				h.phases = append(h.phases, phase)
			}
			if r := p.Status.Reason; r == "Preempting" || r == "Evicted" {
				h.evicted = r + ": " + p.Status.Message
			}
		}
	}()
	return func() podHistory {
		cancel()
		wi.Stop()
		<-done
		return h
	}
}
