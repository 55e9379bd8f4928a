package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

const selectorLabel = "sandbox.test/class"

// mirrorNamespace holds the test's stand-ins for mirror pods.
const mirrorNamespace = v1alpha1.DefaultPodNamespace

func createNode(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	if err := admin.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// poolsOfClass lists the pools whose classRef names class.
func poolsOfClass(t *testing.T, class string) []v1alpha1.SandboxPool {
	t.Helper()
	var list v1alpha1.SandboxPoolList
	if err := admin.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(p v1alpha1.SandboxPool) bool { return p.Spec.ClassRef.Name != class })
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	support.Eventually(t, what, within, 25*time.Millisecond, cond)
}

// classEvents lists the events.k8s.io events about an object with the reason.
func classEvents(t *testing.T, kind, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind != kind || e.Regarding.Name != name || e.Reason != reason
	})
}

func deleteClassAndWait(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Delete(ctx, &v1alpha1.SandboxPoolClass{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, "class "+name+" and its pools gone", 30*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.SandboxPoolClass{})
		n := len(poolsOfClass(t, name))
		return apierrors.IsNotFound(err) && n == 0, fmt.Sprintf("class get: %v, %d pools", err, n)
	})
}

// classWithPool creates class (cpu 1, memory 1Gi) selecting node by selectorLabel, deletes it
// at the end of the test, and returns the name of node's pool once it exists.
func classWithPool(ctx context.Context, t *testing.T, class, node string) string {
	t.Helper()
	if err := admin.Create(ctx, wrappers.MakeClass(class).Selector(selectorLabel, class).Resources("1", "1Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClassAndWait(t, class) })
	name := naming.PoolName(node)
	eventually(t, "the pool exists", 10*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.SandboxPool{})
		return err == nil, fmt.Sprint(err)
	})
	return name
}

// updateClass reads class into c, applies change and writes it back, reading again on a
// conflict: the controller writes the class's status between a test's read and its write.
func updateClass(ctx context.Context, t *testing.T, class string, c *v1alpha1.SandboxPoolClass, change func(*v1alpha1.SandboxPoolClass)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := admin.Get(ctx, types.NamespacedName{Name: class}, c); err != nil {
			return err
		}
		change(c)
		return admin.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mirrorPod stands in for the pod kubelet mirrors from the agent's static manifest: in the
// pod namespace, bound to the node, with kubelet's mirror annotation, labelled with the pool.
func mirrorPod(t *testing.T, pool, node string) *corev1.Pod {
	t.Helper()
	return podLike(t, mirrorNamespace, "sandbox-pool-"+pool+"-"+node, pool, node, true)
}

// podLike creates a pod in namespace, bound to node, that carries pool's label and
// annotation, and kubelet's mirror annotation when mirror is set.
func podLike(t *testing.T, namespace, name, pool, node string, mirror bool) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels:      map[string]string{v1alpha1.LabelPoolName: naming.LabelValue(pool)},
			Annotations: map[string]string{v1alpha1.AnnotationPoolName: pool}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "pause", Image: "pause"}}},
	}
	if mirror {
		pod.Annotations[corev1.MirrorPodAnnotationKey] = "static-" + name
	}
	if err := admin.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func deletePodNow(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := admin.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// TestClassFanOut covers the class lifecycle on 50 nodes: every matching node gets its pool
// (labels, owner, finalizer, snapshot), the class counts them, a relabelled node loses its
// pool, a policy change reaches every snapshot, and deleting the class deletes the pools,
// each once its mirror pod is gone.
func TestClassFanOut(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const class, n = "fanout", 50
	var nodes []string
	for i := range n {
		nodes = append(nodes, fmt.Sprintf("fan-%02d", i))
		createNode(t, nodes[i], map[string]string{selectorLabel: class})
	}
	createNode(t, "fan-unselected", map[string]string{selectorLabel: "someone-else"})

	c := wrappers.MakeClass(class).Selector(selectorLabel, class).Resources("2", "1Gi").Obj()
	start := time.Now()
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClassAndWait(t, class) })
	eventually(t, "a pool for each of 50 nodes", 60*time.Second, func() (bool, string) {
		got := len(poolsOfClass(t, class))
		return got == n, fmt.Sprintf("%d pools", got)
	})
	t.Logf("fan-out to %d nodes: all pools exist after %s", n, time.Since(start).Round(time.Millisecond))

	if err := admin.Get(ctx, types.NamespacedName{Name: class}, c); err != nil {
		t.Fatal(err)
	}
	for _, p := range poolsOfClass(t, class) {
		if p.Labels[v1alpha1.LabelClass] != class || p.Labels[v1alpha1.LabelNode] != p.Spec.NodeName ||
			!metav1.IsControlledBy(&p, c) || !slices.Contains(p.Finalizers, v1alpha1.FinalizerPoolPlaceholderPod) ||
			p.Name != naming.PoolName(p.Spec.NodeName) || !strings.HasPrefix(p.Spec.NodeName, "fan-") {
			t.Fatalf("pool %s: labels %v owners %v finalizers %v", p.Name, p.Labels, p.OwnerReferences, p.Finalizers)
		}
		if !p.Spec.ResourcePolicy.Resources.Cpu().Equal(resource.MustParse("2")) || p.Spec.PlaceholderPod.RuntimeClassName != "placeholder" {
			t.Fatalf("pool %s snapshot %+v, want the class's cpu 2 and the schema default runtimeClassName", p.Name, p.Spec)
		}
	}
	eventually(t, "class status counts 50 pools", 10*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, types.NamespacedName{Name: class}, c)
		s := c.Status
		synced := meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionPoolsSynced.String())
		return ptr.Deref(s.TotalSandboxPools, 0) == n && ptr.Deref(s.NotReadySandboxPools, 0) == n && s.ObservedGeneration == c.Generation && synced,
			fmt.Sprintf("%+v", s)
	})
	if !slices.Contains(c.Finalizers, v1alpha1.FinalizerClassPools) {
		t.Errorf("class finalizers %v, want %s", c.Finalizers, v1alpha1.FinalizerClassPools)
	}

	// Relabel one node off the selector: its pool goes, the others stay.
	var node corev1.Node
	if err := admin.Get(ctx, types.NamespacedName{Name: nodes[7]}, &node); err != nil {
		t.Fatal(err)
	}
	node.Labels[selectorLabel] = "elsewhere"
	if err := admin.Update(ctx, &node); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the relabelled node's pool is deleted", 20*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: naming.PoolName(nodes[7])}, &v1alpha1.SandboxPool{})
		return apierrors.IsNotFound(err) && len(poolsOfClass(t, class)) == n-1, fmt.Sprint(err)
	})

	// Change the class's policy: every snapshot follows.
	updateClass(ctx, t, class, c, func(c *v1alpha1.SandboxPoolClass) {
		c.Spec.ResourcePolicy.Resources[corev1.ResourceCPU] = resource.MustParse("3")
		c.Spec.ResourcePolicy.Resources["example.com/gpu"] = resource.MustParse("1")
	})
	start = time.Now()
	eventually(t, "every snapshot has the new policy", 30*time.Second, func() (bool, string) {
		stale := 0
		for _, p := range poolsOfClass(t, class) {
			r := p.Spec.ResourcePolicy.Resources
			if !r.Cpu().Equal(resource.MustParse("3")) || !r.Name("example.com/gpu", resource.DecimalSI).Equal(resource.MustParse("1")) {
				stale++
			}
		}
		return stale == 0, fmt.Sprintf("%d stale snapshots", stale)
	})
	t.Logf("policy change reached %d snapshots after %s", n-1, time.Since(start).Round(time.Millisecond))

	// Delete the class while three pools still have mirror pods: those three wait for
	// their pods, the rest go at once; then the pods go and so do the pools and the class.
	var pods []*corev1.Pod
	for _, node := range nodes[:3] {
		pods = append(pods, mirrorPod(t, naming.PoolName(node), node))
	}
	if err := admin.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, "only the three pools with mirror pods remain, terminating", 30*time.Second, func() (bool, string) {
		left := poolsOfClass(t, class)
		var names []string
		for _, p := range left {
			if p.DeletionTimestamp == nil || !slices.Contains(p.Finalizers, v1alpha1.FinalizerPoolPlaceholderPod) {
				return false, "pool " + p.Name + " not terminating with its finalizer"
			}
			names = append(names, p.Spec.NodeName)
		}
		return slices.Equal(names, nodes[:3]), fmt.Sprint(names)
	})
	if err := admin.Get(ctx, types.NamespacedName{Name: class}, c); err != nil {
		t.Fatalf("the class went before its pools: %v", err)
	}
	for _, pod := range pods {
		deletePodNow(t, pod)
	}
	deleteClassAndWait(t, class)
}

// TestConcurrentClassesOneNode: two classes selecting the same node are created at the same
// moment, 20 times. Each time exactly one pool exists, and the losing class has a
// NodeConflict condition and a Warning event naming the winner.
func TestConcurrentClassesOneNode(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	for i := range 20 {
		node := fmt.Sprintf("contested-%02d", i)
		a, b := fmt.Sprintf("race-a-%02d", i), fmt.Sprintf("race-b-%02d", i)
		createNode(t, node, map[string]string{selectorLabel + "-a": a, selectorLabel + "-b": b})
		ca, cb := wrappers.MakeClass(a).Selector(selectorLabel, a).Resources("1", "1Gi").Obj(), wrappers.MakeClass(b).Selector(selectorLabel, b).Resources("1", "1Gi").Obj()
		ca.Spec.Selector.MatchLabels = map[string]string{selectorLabel + "-a": a}
		cb.Spec.Selector.MatchLabels = map[string]string{selectorLabel + "-b": b}

		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, c := range []*v1alpha1.SandboxPoolClass{ca, cb} {
			wg.Go(func() { errs[j] = admin.Create(ctx, c) })
		}
		wg.Wait()
		if err := firstError(errs); err != nil {
			t.Fatal(err)
		}

		var pool v1alpha1.SandboxPool
		eventually(t, "the node's pool exists", 10*time.Second, func() (bool, string) {
			err := admin.Get(ctx, types.NamespacedName{Name: naming.PoolName(node)}, &pool)
			return err == nil, fmt.Sprint(err)
		})
		winner, loser := pool.Spec.ClassRef.Name, a
		if winner == a {
			loser = b
		}
		var lc v1alpha1.SandboxPoolClass
		eventually(t, "the loser "+loser+" reports NodeConflict naming "+winner, 10*time.Second, func() (bool, string) {
			_ = admin.Get(ctx, types.NamespacedName{Name: loser}, &lc)
			cond := meta.FindStatusCondition(lc.Status.Conditions, v1alpha1.ConditionNodeConflict.String())
			return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "class "+winner) &&
				strings.Contains(cond.Message, node), fmt.Sprintf("%+v", cond)
		})
		eventually(t, "a NodeConflict Warning event on "+loser, 10*time.Second, func() (bool, string) {
			evs := classEvents(t, v1alpha1.KindSandboxPoolClass, loser, "NodeConflict")
			return len(evs) == 1 && evs[0].Type == corev1.EventTypeWarning && strings.Contains(evs[0].Note, winner),
				fmt.Sprintf("%d events", len(evs))
		})
		var wc v1alpha1.SandboxPoolClass
		eventually(t, "the winner "+winner+" reports no conflict and one pool", 10*time.Second, func() (bool, string) {
			_ = admin.Get(ctx, types.NamespacedName{Name: winner}, &wc)
			return meta.IsStatusConditionFalse(wc.Status.Conditions, v1alpha1.ConditionNodeConflict.String()) && ptr.Deref(wc.Status.TotalSandboxPools, 0) == 1,
				fmt.Sprintf("%+v", wc.Status)
		})
		if got := len(poolsOfClass(t, a)) + len(poolsOfClass(t, b)); got != 1 {
			t.Fatalf("round %d: %d pools for one node", i, got)
		}
		t.Logf("round %d: %s won", i, winner)
		deleteClassAndWait(t, a)
		deleteClassAndWait(t, b)
	}
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestPriorityClassResolved: a class naming a PriorityClass gets pools whose snapshot has
// the name and its numeric value; a missing one stops the fan-out with a condition until
// the PriorityClass exists.
func TestPriorityClassResolved(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const class, node, pcName = "prio", "prio-node", "sandbox-test-high"
	createNode(t, node, map[string]string{selectorLabel: class})
	c := wrappers.MakeClass(class).Selector(selectorLabel, class).Resources("1", "1Gi").Obj()
	c.Spec.PlaceholderPod.PriorityClassName = pcName
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClassAndWait(t, class) })
	eventually(t, "PoolsSynced=False naming the missing PriorityClass", 10*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, types.NamespacedName{Name: class}, c)
		cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionPoolsSynced.String())
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "PriorityClassNotFound" &&
				strings.Contains(cond.Message, "spec.placeholderPod.priorityClassName") && strings.Contains(cond.Message, pcName),
			fmt.Sprintf("%+v", cond)
	})
	if n := len(poolsOfClass(t, class)); n != 0 {
		t.Fatalf("%d pools created without a priority", n)
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pcName}, Value: 1000000}
	if err := admin.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(ctx, pc) })
	var pool v1alpha1.SandboxPool
	eventually(t, "the pool with the resolved priority", 10*time.Second, func() (bool, string) {
		err := admin.Get(ctx, types.NamespacedName{Name: naming.PoolName(node)}, &pool)
		pp := pool.Spec.PlaceholderPod
		return err == nil && pp.PriorityClassName == pcName && pp.Priority != nil && *pp.Priority == 1000000,
			fmt.Sprintf("%v %+v", err, pp)
	})
}

// TestFinalizerTimeout: a deleted pool whose mirror pod never goes is released after the
// (shortened) finalizer timeout, with a Warning event.
func TestFinalizerTimeout(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const class, node = "stuck", "stuck-node"
	createNode(t, node, map[string]string{selectorLabel: class})
	name := classWithPool(ctx, t, class, node)
	pod := mirrorPod(t, name, node)
	t.Cleanup(func() { deletePodNow(t, pod) })

	if err := admin.Delete(ctx, &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var p v1alpha1.SandboxPool
	if err := admin.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pool not held by its finalizer while the mirror pod exists: %v", err)
	}
	// The class may recreate the pool once the old one is gone: wait for a different UID or
	// none, and for the event.
	uid := p.UID
	eventually(t, "the pool is released by the finalizer timeout", finalizerTimeout+15*time.Second, func() (bool, string) {
		var now v1alpha1.SandboxPool
		err := admin.Get(ctx, types.NamespacedName{Name: name}, &now)
		return apierrors.IsNotFound(err) || (err == nil && now.UID != uid), fmt.Sprint(err)
	})
	if held := time.Since(deleted); held < finalizerTimeout-time.Second {
		t.Errorf("released after %s, before the %s timeout", held, finalizerTimeout)
	}
	eventually(t, "a FinalizerTimeout Warning event", 10*time.Second, func() (bool, string) {
		evs := classEvents(t, v1alpha1.KindSandboxPool, name, "FinalizerTimeout")
		return len(evs) > 0 && evs[0].Type == corev1.EventTypeWarning && strings.Contains(evs[0].Note, pod.Name), fmt.Sprint(len(evs))
	})
}
