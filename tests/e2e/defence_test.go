package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// --piece-start-timeout (15 s here) the pool is Degraded with ResourceSynced=False, reason
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

// TestGrowthNeverEvicts races the scheduler's bind of a regular pod against a growth of the
// pool into the same room: the pod asks for all the free cpu but 100m, the growth for 200m,
// so the node holds one of them, not both. The pod is created at three moments: bound (and
// running) before the growth is asked; the instant the pool's spec carries the growth (the
// agent reads the node's room in the pass that follows, while the scheduler binds the pod);
// and the instant the growth's manifest is written (before kubelet has created its mirror
// pod, which is what the scheduler counts). Whatever the order, the growth evicts no pod
// that runs: the agent sends a growth to kubelet only when the scheduler's view of the node,
// read in the same pass, has room for it (without --resize-preempt), and a pod that runs was
// bound before. So either the pod runs and the growth waits (Deferred, InsufficientRoom)
// until the pod goes, or the growth's piece is counted and the pod is not placed, or the
// pod, bound in the moment between the agent's read and kubelet's admission of the piece, is
// refused by kubelet before it ever ran: at admission, or preempted before it started
// (docs/agent.md, "What is left").
func TestGrowthNeverEvicts(t *testing.T) {
	requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	ctx := context.Background()
	for round, when := range []string{"pod bound first", "pool spec grown", "growth's manifest written"} {
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
		create := func() {
			t.Helper()
			if _, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		generation, pieces := getPool(t).Generation, len(pieceFiles())
		if round == 0 {
			create()
			eventually(t, "the pod running", time.Minute, func() (bool, string) {
				p := getPod(t, metav1.NamespaceDefault, name)
				return podReady(p), podState(p)
			})
		}
		setClassResources(t, wrappers.Resources("700m", baseMemory))
		switch round {
		case 1:
			eventually(t, "the pool's spec grown", 30*time.Second, func() (bool, string) {
				return getPool(t).Generation > generation, "not yet"
			})
			create()
		case 2:
			eventually(t, "the growth's manifest written", 30*time.Second, func() (bool, string) {
				return len(pieceFiles()) > pieces || getPool(t).Status.Resize.Status == v1alpha1.ResizeDeferred, "not yet"
			})
			create()
		}
		// Settled: the pod runs and the growth waits for room, or the growth is done and the
		// pod does not run.
		var outcome string
		eventually(t, when+": the race settled", 2*time.Minute, func() (bool, string) {
			p, g := getPod(t, metav1.NamespaceDefault, name), getPool(t)
			switch {
			case p != nil && podReady(p) && g != nil && g.Status.Resize.Status == v1alpha1.ResizeDeferred &&
				condOf(g, v1alpha1.ConditionResizeDeferred.String()).Reason == v1alpha1.ReasonInsufficientRoom.String():
				outcome = "the pod runs, the growth waits for room"
			case p != nil && !podReady(p) && g != nil && g.Status.Resize.Status == v1alpha1.ResizeCompleted &&
				g.Status.Resize.RequestedCPU.Cmp(resource.MustParse("700m")) == 0:
				outcome = "the growth is done, the pod " + podState(p)
			}
			return outcome != "", fmt.Sprintf("pod %s; %s", podState(p), describe(g))
		})
		// kubelet's events say it too: a preemption is a Warning Preempting (whose final
		// status may read Succeeded, with no reason).
		var events []string
		if p := getPod(t, metav1.NamespaceDefault, name); p != nil {
			events = podEvents(t, p)
		}
		deletePodNow(t, metav1.NamespaceDefault, name)
		waitSynced(t, "700m", baseMemory, 2*time.Minute)
		history := seen()
		for _, e := range events {
			if strings.HasPrefix(e, "Warning/Preempting:") || strings.HasPrefix(e, "Warning/Evicted:") {
				history.evicted = e
			}
		}
		t.Logf("%s: %s; the pod went %s; its events: %s", when, outcome, strings.Join(history.phases, " → "), strings.Join(events, "; "))
		if history.evicted != "" && (history.ran || round == 0) {
			t.Errorf("%s: the growth evicted pod %s, which ran: %s", when, name, history.evicted)
		}
		setClassResources(t, wrappers.Resources(baseCPU, baseMemory))
		waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
	}
}

// podHistory is what a watch saw of a pod: its phases in order, how it was evicted, if it
// was (kubelet's preemption of a pod for a critical one: reason Preempting and the condition
// DisruptionTarget; an eviction: reason Evicted), and whether it ran before that (the API
// showed it Running before the eviction was in its status).
type podHistory struct {
	phases  []string
	evicted string
	ran     bool
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
			if p.Status.Reason != "" || p.Status.Message != "" {
				phase += fmt.Sprintf("(%s: %s)", p.Status.Reason, p.Status.Message)
			}
			if n := len(h.phases); n == 0 || h.phases[n-1] != phase {
				h.phases = append(h.phases, phase)
			}
			disrupted := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
					disrupted = true
					h.evicted = c.Reason + ": " + c.Message
				}
			}
			if r := p.Status.Reason; r == "Preempting" || r == "Evicted" {
				h.evicted = r + ": " + p.Status.Message
			}
			h.ran = h.ran || (p.Status.Phase == corev1.PodRunning && !disrupted && h.evicted == "")
		}
	}()
	return func() podHistory {
		cancel()
		wi.Stop()
		<-done
		return h
	}
}
