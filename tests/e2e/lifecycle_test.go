package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// TestClassLifecycleAndTheLock walks a class through its life on a real node:
//   - class → pool Ready; the mirror pod runs on the placeholder runtime with the pool's
//     requests, and node-ctl enforces them;
//   - the lock is real: kubelet's own admission rejects a regular pod that needs more cpu
//     than the node has left (OutOfcpu);
//   - class deleted → manifest gone → mirror pod gone → pool finalizer removed (the pool
//     is gone), node-ctl stopped, the capacity free: the same regular pod now runs;
//   - class created again → the agent starts node-ctl again, and kubelet admits the
//     placeholder (a static pod, so critical) by preempting the regular pod that took
//     the room — what a regular pod sees when a pool comes back larger than what is left —
//     and not the cluster half's Pods on the node, which are critical too
//     (system-cluster-critical), although kubelet would pick them first (lower QoS).
func TestClassLifecycleAndTheLock(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	deleteClass(t)
	t.Cleanup(func() {
		deletePodNow(t, metav1.NamespaceDefault, "squatter")
		deletePodNow(t, metav1.NamespaceDefault, "squatter-2")
		ensureClass(t)
	})
	clusterPods := clusterPodUIDs(t)
	// What the node holds without the pool: the cluster half's Pods.
	without := allocated(t)

	// Lock all the node's free cpu but 400m.
	avail := free(t)
	lockCPU := avail.Cpu().DeepCopy()
	lockCPU.Sub(resource.MustParse("400m"))
	if lockCPU.Sign() <= 0 {
		t.Fatalf("the node has too little free cpu for this test: %s", avail.Cpu())
	}
	t0 := time.Now()
	if err := k8s.Create(ctx, newClass(wrappers.Resources(lockCPU.String(), baseMemory))); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, lockCPU.String(), baseMemory, 2*time.Minute)
	t.Logf("class applied → pool Ready and synced in %s", time.Since(t0).Round(time.Millisecond))

	// The mirror pod: placeholder runtime, the pool's requests (= limits), docs/design.md §2 labels.
	pod := mirrorPod(t)
	c := pod.Spec.Containers[0]
	if ptr.Deref(pod.Spec.RuntimeClassName, "") != "placeholder" || c.Resources.Requests.Cpu().Cmp(lockCPU) != 0 ||
		c.Resources.Limits.Memory().String() != baseMemory || pod.Spec.NodeName != nodeName ||
		pod.Labels[v1alpha1.LabelClass] != className || pod.Labels[v1alpha1.LabelPoolName] != naming.LabelValue(poolName) ||
		pod.Spec.PriorityClassName != "system-node-critical" || pod.Spec.Priority == nil {
		t.Errorf("mirror pod: runtimeClassName %v, node %s, requests %v, limits %v, labels %v, priority %q %v",
			pod.Spec.RuntimeClassName, pod.Spec.NodeName, c.Resources.Requests, c.Resources.Limits, pod.Labels,
			pod.Spec.PriorityClassName, pod.Spec.Priority)
	}
	// Kubelet and the scheduler count the same: no overhead on either side.
	if pod.Spec.Overhead != nil {
		t.Errorf("mirror pod overhead %v, want none (kubelet's static pod has none)", pod.Spec.Overhead)
	}
	// containerd runs its sandbox with the placeholder handler.
	out, err := s.Crictl(ctx, "pods", "--label", v1alpha1.LabelPoolName+"="+naming.LabelValue(poolName), "--state", "ready", "-o", "json")
	if err != nil {
		t.Fatalf("crictl pods: %v: %s", err, out)
	}
	var sandboxes struct {
		Items []struct {
			RuntimeHandler string `json:"runtimeHandler"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &sandboxes); err != nil || len(sandboxes.Items) != 1 || sandboxes.Items[0].RuntimeHandler != "placeholder" {
		t.Errorf("containerd's ready sandboxes of the placeholder pod: %v %s", err, out)
	}
	// node-ctl enforces the pool on its cgroup.
	if st := nodeCtlState(t); st == nil || st.AllocatableMemoryBytes != ptr.To(resource.MustParse(baseMemory)).Value() || st.Zone != zone {
		t.Errorf("node-ctl state: %+v", st)
	}

	// The lock: 500m more than the node has left.
	squat := regularPod("squatter", wrappers.Resources("500m", "32Mi"))
	if _, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, squat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "kubelet rejects the pod with OutOfcpu", time.Minute, func() (bool, string) {
		p := getPod(t, metav1.NamespaceDefault, "squatter")
		return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "OutOfcpu", podState(p)
	})
	p := getPod(t, metav1.NamespaceDefault, "squatter")
	t.Logf("while the pool exists, kubelet says: %s: %s", p.Status.Reason, p.Status.Message)

	// Class deleted: the manifest, then the mirror pod, then the pool (its finalizer waits
	// for the mirror pod), and node-ctl is stopped.
	nodeCtlPid := s.NodeCtl.Pid()
	if err := k8s.Delete(ctx, newClass(nil)); err != nil {
		t.Fatal(err)
	}
	var manifestGone, podGone, poolGone time.Duration
	t0 = time.Now()
	eventually(t, "manifest, mirror pod and pool gone", time.Minute, func() (bool, string) {
		since := time.Since(t0)
		if len(pieceFiles()) == 0 && manifestGone == 0 {
			manifestGone = since
		}
		if mirrorPod(t) == nil && podGone == 0 {
			podGone = since
		}
		if getPool(t) == nil && poolGone == 0 {
			poolGone = since
		}
		return manifestGone > 0 && podGone > 0 && poolGone > 0, fmt.Sprintf("manifest %s, pod %s, pool %s", manifestGone, podGone, poolGone)
	})
	t.Logf("class deleted → manifest gone %s, mirror pod gone %s, pool gone %s", manifestGone, podGone, poolGone)
	if poolGone < podGone || podGone < manifestGone {
		t.Errorf("order: manifest gone at %s, mirror pod at %s, pool (finalizer) at %s; want manifest ≤ pod ≤ pool", manifestGone, podGone, poolGone)
	}
	eventually(t, "node-ctl stopped by the agent", 10*time.Second, func() (bool, string) {
		return s.NodeCtl.Stopped() && !s.NodeCtl.Running(), fmt.Sprintf("stopped %v, running %v", s.NodeCtl.Stopped(), s.NodeCtl.Running())
	})
	if got := allocated(t); !equalLists(got, without) {
		t.Errorf("node has %v allocated without the pool, had %v before it", got, without)
	}

	// The capacity is free: the same pod runs.
	if _, err := kube.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, regularPod("squatter-2", wrappers.Resources("500m", "32Mi")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the same pod runs once the pool is gone", time.Minute, func() (bool, string) {
		p := getPod(t, metav1.NamespaceDefault, "squatter-2")
		return podReady(p), podState(p)
	})

	// The class again: node-ctl is started again (the agent's restart command), and the
	// static placeholder pod is admitted by preempting the regular pod.
	if err := k8s.Create(ctx, newClass(wrappers.Resources(lockCPU.String(), baseMemory))); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, lockCPU.String(), baseMemory, 2*time.Minute)
	if s.NodeCtl.Pid() == nodeCtlPid || s.NodeCtl.Stopped() {
		t.Errorf("node-ctl was not started again: pid %d (was %d), stopped %v", s.NodeCtl.Pid(), nodeCtlPid, s.NodeCtl.Stopped())
	}
	eventually(t, "kubelet preempts the regular pod", 30*time.Second, func() (bool, string) {
		p = getPod(t, metav1.NamespaceDefault, "squatter-2")
		return p != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded), podState(p)
	})
	t.Logf("when the pool comes back, the regular pod sees: %s; conditions %s; events %v", podState(p), conditions(p), podEvents(t, p))
	if now := clusterPodUIDs(t); !maps.Equal(now, clusterPods) {
		t.Errorf("the cluster half's Pods changed while kubelet made room for the placeholder: %v → %v", clusterPods, now)
	}
}
