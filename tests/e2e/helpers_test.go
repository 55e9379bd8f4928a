package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

const (
	className = "e2e"
	// baseCPU and baseMemory are the suite class's resources between tests.
	baseCPU, baseMemory = "500m", "128Mi"
	// pollInterval is how often the waits look again; every wait has a deadline.
	pollInterval = 50 * time.Millisecond
)

var poolName = naming.PoolName(nodeName)

// eventually polls cond until it holds, failing t with the last state when within passes.
func eventually(t testing.TB, what string, within time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	return support.Eventually(t, what, within, pollInterval, cond)
}

// newClass is the suite's class: the e2e node's label, the given resources, the priority
// of system-node-critical (a PriorityClass, so the mirror pod passes the Priority plugin).
func newClass(res corev1.ResourceList) *v1alpha1.SandboxPoolClass {
	return wrappers.MakeClass(className).Selector(nodeLabelKey, nodeLabelValue).ResourceList(res).
		PriorityClass("system-node-critical").Obj()
}

// ensureClass makes sure the suite's class exists with the base resources and its pool is
// Ready, creating or resizing it as needed.
func ensureClass(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var c v1alpha1.SandboxPoolClass
	err := k8s.Get(ctx, types.NamespacedName{Name: className}, &c)
	switch {
	case apierrors.IsNotFound(err):
		if err := k8s.Create(ctx, newClass(wrappers.Resources(baseCPU, baseMemory))); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatal(err)
	case c.DeletionTimestamp != nil:
		waitClassGone(t)
		ensureClass(t)
		return
	default:
		setClassResources(t, wrappers.Resources(baseCPU, baseMemory))
	}
	waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
}

// setClassResources updates the suite class's resources.
func setClassResources(t testing.TB, res corev1.ResourceList) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c v1alpha1.SandboxPoolClass
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: className}, &c); err != nil {
			return err
		}
		c.Spec.ResourcePolicy.Resources = res
		return k8s.Update(context.Background(), &c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deleteClass deletes the suite's class (if there is one) and waits until the pool, its
// manifest and its mirror pod are gone.
func deleteClass(t testing.TB) {
	t.Helper()
	err := k8s.Delete(context.Background(), &v1alpha1.SandboxPoolClass{ObjectMeta: metav1.ObjectMeta{Name: className}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitClassGone(t)
}

func waitClassGone(t testing.TB) {
	t.Helper()
	eventually(t, "class, pool, manifests and mirror pods gone", time.Minute, func() (bool, string) {
		var c v1alpha1.SandboxPoolClass
		cerr := k8s.Get(context.Background(), types.NamespacedName{Name: className}, &c)
		p := getPool(t)
		files, pods := pieceFiles(), mirrorPods(t)
		return apierrors.IsNotFound(cerr) && p == nil && len(files) == 0 && len(pods) == 0,
			fmt.Sprintf("class: %v, pool: %v, manifests: %d, mirror pods: %d", cerr, p != nil, len(files), len(pods))
	})
}

// getPool returns the node's pool, nil when there is none.
func getPool(t testing.TB) *v1alpha1.SandboxPool {
	t.Helper()
	var p v1alpha1.SandboxPool
	err := k8s.Get(context.Background(), types.NamespacedName{Name: poolName}, &p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// The pool's lock is a set of placeholder pods, its pieces (docs/agent.md, "The lock"). On
// this node, which has room, a resize ends with one piece.

// mirrorPods returns the pool's mirror pods as the API server has them (not being
// deleted), in name order.
func mirrorPods(t testing.TB) []corev1.Pod {
	t.Helper()
	pods, err := poolPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// mirrorPod returns the pool's newest mirror pod (the highest piece number) not being
// deleted, nil when there is none.
func mirrorPod(t testing.TB) *corev1.Pod {
	t.Helper()
	var newest *corev1.Pod
	for _, p := range mirrorPods(t) {
		if newest == nil || pieceOf(p.Name) > pieceOf(newest.Name) {
			newest = &p
		}
	}
	return newest
}

// pieceOf is the piece number in a placeholder mirror pod's name, 0 when it has none.
func pieceOf(mirror string) int {
	rest, _ := strings.CutSuffix(mirror, "-"+nodeName)
	n, _ := strconv.Atoi(strings.TrimPrefix(rest, v1alpha1.PlaceholderPodName+"-"))
	return n
}

// poolPods lists every placeholder mirror pod of the pool, being deleted or failed too.
func poolPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := kube.CoreV1().Pods(v1alpha1.DefaultPodNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: v1alpha1.LabelPoolName + "=" + naming.LabelValue(poolName),
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items, nil
}

// pieceFiles are the pool's manifests on the node, in piece order.
func pieceFiles() []manifest.File {
	files, _ := manifest.Pieces(suite.s.ManifestDir(), poolName)
	return files
}

// manifestState is the pool's manifests as bytes by file name, to tell whether any changed.
func manifestState() map[string]string {
	out := map[string]string{}
	for _, f := range pieceFiles() {
		out[filepath.Base(f.Path)] = string(f.Data)
	}
	return out
}

func condOf(p *v1alpha1.SandboxPool, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

func condIs(p *v1alpha1.SandboxPool, typ string, s metav1.ConditionStatus) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	return c != nil && c.Status == s
}

// describe is a pool's phase, conditions and resize status, for failure messages.
func describe(p *v1alpha1.SandboxPool) string {
	if p == nil {
		return "no pool"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s:", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
	}
	if r := p.Status.Resize; r.Status != "" {
		fmt.Fprintf(&b, " resize=%s %q", r.Status, r.DeferredReason)
	}
	return b.String()
}

func podReady(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeCtlState(t testing.TB) *api.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := suite.s.NodeCtlClient().State(ctx)
	if err != nil {
		return nil
	}
	return st
}

// waitSynced waits until the pool runs cpu and memory everywhere: node-ctl applied them,
// its mirror pods request them in all and are all ready, the pool is Ready with
// ResourceSynced=True. (On a node with room a resize ends with one placeholder pod; without,
// the pieces of a growth stay apart until the node has room to fold them.)
func waitSynced(t testing.TB, cpu, memory string, within time.Duration) time.Duration {
	t.Helper()
	wantCPU, wantMem := resource.MustParse(cpu), resource.MustParse(memory)
	return eventually(t, fmt.Sprintf("pool Ready and synced at cpu %s, memory %s", cpu, memory), within, func() (bool, string) {
		p := getPool(t)
		st := nodeCtlState(t)
		pods := mirrorPods(t)
		if p == nil || st == nil || len(pods) == 0 {
			return false, fmt.Sprintf("pool %v, node-ctl state %v, mirror pods %d; %s", p != nil, st != nil, len(pods), describe(p))
		}
		req := support.Requests(pods...)
		ready := true
		for i := range pods {
			ready = ready && podReady(&pods[i])
		}
		appliedMem, _ := resource.ParseQuantity(st.AppliedResources[api.ResourceMemory])
		appliedCPU, _ := resource.ParseQuantity(st.AppliedResources[api.ResourceCPU])
		// kubelet's own count too: after a kubelet restart the API server still shows the
		// pods before kubelet has read its manifests again.
		kl, err := kubeletLock(context.Background())
		ok := p.Status.Phase == v1alpha1.PhaseReady && condIs(p, v1alpha1.ConditionResourceSynced.String(), metav1.ConditionTrue) &&
			ready && req.Memory().Cmp(wantMem) == 0 && req.Cpu().Cmp(wantCPU) == 0 &&
			appliedMem.Cmp(wantMem) == 0 && appliedCPU.Cmp(wantCPU) == 0 && err == nil && equalLists(kl, req)
		return ok, fmt.Sprintf("node-ctl %v, %d mirror pods request %s/%s (all ready: %v), kubelet %v (%v); %s", st.AppliedResources,
			len(pods), req.Cpu(), req.Memory(), ready, kl, err, describe(p))
	})
}

// waitPhase waits until the pool's phase is want and cond holds for it.
func waitPhase(t testing.TB, want v1alpha1.SandboxPoolPhase, within time.Duration, cond func(*v1alpha1.SandboxPool) bool) time.Duration {
	t.Helper()
	return eventually(t, "pool "+string(want), within, func() (bool, string) {
		p := getPool(t)
		return p != nil && p.Status.Phase == want && (cond == nil || cond(p)), describe(p)
	})
}

// regularPod is an ordinary pod bound to the node by nodeName (there is no scheduler):
// the local pause image run by runc, on the host network, with requests equal to limits.
func regularPod(name string, res corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "pause", Image: image.Name, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			}},
		},
	}
}

// podState is a pod's phase, reason and message, for messages.
func podState(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	return fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
}

// conditions lists a pod's conditions with their reasons and messages.
func conditions(p *corev1.Pod) string {
	var b strings.Builder
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s(%s %q) ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// podEvents are the core events about a pod (kubelet records with the core API).
func podEvents(t testing.TB, p *corev1.Pod) []string {
	t.Helper()
	evs, err := kube.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Type+"/"+e.Reason+": "+e.Message)
	}
	return out
}

func getPod(t testing.TB, namespace, name string) *corev1.Pod {
	t.Helper()
	pod, err := kube.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// deletePodNow removes a pod from the API at once (grace period 0) and waits until it is
// gone; kubelet stops its containers.
func deletePodNow(t testing.TB, namespace, name string) {
	t.Helper()
	err := kube.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	eventually(t, "pod "+name+" deleted", 30*time.Second, func() (bool, string) {
		return getPod(t, namespace, name) == nil, "still there"
	})
}

// nodeAllocatable is the node's allocatable cpu and memory.
func nodeAllocatable(t testing.TB) corev1.ResourceList {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.Allocatable
}

// allocated is the sum of the requests (with pod overhead) of the pods bound to the node
// that are not terminal: what kubelet admission and the scheduler count.
func allocated(t testing.TB) corev1.ResourceList {
	t.Helper()
	pods, err := kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	return support.Requests(live...)
}

// eventsFor lists the events (events.k8s.io) about the object named name.
func eventsFor(t testing.TB, name string) []string {
	t.Helper()
	evs, err := kube.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Type+"/"+e.Reason+": "+e.Note)
		}
	}
	return out
}
