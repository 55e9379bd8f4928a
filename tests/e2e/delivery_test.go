package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/hack/pause/image"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// Delivery of the slice (docs/node-ctl-contract.md, "Delivery"): what a process in node-ctl's
// cgroup gets when the pods beside it want more than the node has.
const (
	// deliveredShare is the least share of the pool's cpu the slice must get under
	// saturation. The noise margin: the slice's quota caps it at the pool's cpu, and its
	// weight is the pool's among the pods, so it gets the pool's cpu whenever the pods'
	// root gets a little more than that; a test package running beside this one on the
	// machine takes cpu from the pods' root, not from the slice's share in it.
	deliveredShare = 0.95
	// fullShare is the least share of its size a Guaranteed pod gets when the pods' root
	// has room for it: its quota is counted per 100 ms period, so a 5 s window starts and
	// ends up to one period's quota (2 % of its size) away from the cpu it was given.
	fullShare = 0.98
	// cpuWindow is how long one measurement of the slice's cpu lasts.
	cpuWindow = 5 * time.Second
	// saturatorCPU is the request of the co-located Burstable pod that burns every core
	// (the measurement: 100m, no limit).
	saturatorCPU = "100m"
)

// TestSliceGetsItsCPU: while a co-located Burstable pod (request 100m, no limit) burns one
// thread more than the node has cores, a sandbox in node-ctl's slice that wants more than
// the pool gets what a Guaranteed pod of the pool's size burning beside it gets (at least 95
// % of it), and at least 95 % of the pool whenever that pod gets its own size; after a
// growth, of the new size (the slice's weight follows the lock).
//
// The noise margin: the slice and the Guaranteed pod both weigh their requests in the pods'
// root, so whatever the machine's other processes (another test package) take from the
// pods' root they take from both alike; the absolute check is made on the first window, of
// deliveryWindows at most, in which the Guaranteed pod got its size.
func TestSliceGetsItsCPU(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	capacity := nodeCapacity(t)
	cores := int(capacity.Cpu().Value())
	sandbox := nodectltest.StartBurner(t, s.NodeCtlCgroup, cores)
	sat := saturate(t, "saturator", cores+1)

	const grown = "700m"
	for _, size := range []string{baseCPU, grown} {
		if size == grown {
			growAndFold(t, size)
		}
		pool := resource.MustParse(size)
		anchor := guaranteedBurner(t, "guaranteed", wrappers.Resources(size, "32Mi"), cores)
		checkDelivered(t, s, pool.MilliValue(), sandbox, anchor, sat)
		deletePodNow(t, metav1.NamespaceDefault, "guaranteed")
	}
}

// growAndFold grows the pool's cpu to size on a node with room for a second copy of the
// lock, and waits until the lock is synced in Guaranteed pieces only: the growth's piece, of
// cpu alone, is folded into one piece of the whole size.
func growAndFold(t *testing.T, size string) {
	t.Helper()
	setClassResources(t, wrappers.Resources(size, baseMemory))
	waitSynced(t, size, baseMemory, 2*time.Minute)
	eventually(t, "the lock in Guaranteed pieces only", time.Minute, func() (bool, string) {
		var qos []string
		ok := true
		for _, p := range mirrorPods(t) {
			qos = append(qos, p.Name+" "+string(p.Status.QOSClass))
			ok = ok && p.Status.QOSClass == corev1.PodQOSGuaranteed
		}
		return ok, strings.Join(qos, ", ")
	})
}

// The windows TestSliceGetsItsCPU measures: at least minWindows for the comparison with the
// Guaranteed pod (their sums: one short window on a busy machine varies by several per
// cent), and up to deliveryWindows to find one in which the Guaranteed pod got its size.
const (
	minWindows      = 2
	deliveryWindows = 4
)

// checkDelivered measures the slice, the Guaranteed pod and the saturating pod, and checks
// the slice against the Guaranteed pod over all the windows, and against the pool in the
// first window in which the Guaranteed pod got its own size (the pods' root then got enough
// of the node for a pod of the pool's size; when the machine's other processes take more,
// the slice loses what every pod loses, which the first check covers).
func checkDelivered(t *testing.T, s *stack.Stack, pool int64, sandbox *nodectltest.Burner, anchor, sat burner) {
	t.Helper()
	want := int64(deliveredShare * float64(pool))
	full := int64(fullShare * float64(pool))
	var sumSlice, sumG int64
	checked := false
	for i := 0; i < deliveryWindows && (i < minWindows || !checked); i++ {
		m := measureCPU(t, cpuWindow, sandbox.CPUTime, anchor.cpuTime, sat.cpuTime)
		slice, g := m[0], m[1]
		sumSlice, sumG = sumSlice+slice, sumG+g
		t.Logf("pool %dm, window %d: the slice got %dm (%.1f %%), a Guaranteed pod of its size %dm, the saturating pod %dm",
			pool, i+1, slice, 100*float64(slice)/float64(pool), g, m[2])
		if checked || g < full {
			continue // the machine's other processes took the pods' share: not this window
		}
		checked = true
		if slice < want {
			t.Errorf("pool %dm under saturation: the slice got %dm, want at least %dm (%.0f %%), while a Guaranteed pod of its size got %dm; %s",
				pool, slice, want, 100*deliveredShare, g, cpuWeights(s, sandbox.Pid))
		}
	}
	if sumSlice < int64(deliveredShare*float64(sumG)) {
		t.Errorf("pool %dm under saturation: the slice got %.0f %% of what a Guaranteed pod of its size got beside it, want at least %.0f %%; %s",
			pool, 100*float64(sumSlice)/float64(sumG), 100*deliveredShare, cpuWeights(s, sandbox.Pid))
	}
	if !checked {
		t.Logf("pool %dm: in none of %d windows did a Guaranteed pod of the pool's size get %dm (the machine is busy)", pool, deliveryWindows, full)
	}
}

// TestSliceKeepsItsMemory: a sandbox that holds memory within the pool is never the one
// killed when a co-located pod outgrows its request, and the pod never gets the memory the
// pool reserved: the pods' root (kubelet's allocatable memory) holds the pods and the
// sandboxes together, so the pod is killed once they fill it.
func TestSliceKeepsItsMemory(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	const holdMiB = 100 // of the pool's 128Mi
	hog := nodectltest.StartHog(t, s.NodeCtlCgroup, holdMiB)
	if err := hog.WaitAllocated(time.Minute); err != nil {
		t.Fatal(err)
	}
	limit := shrinkPodRoot(t, s, 256<<20)
	others := podsMemory(t, "")

	eater := memoryEater("eater")
	createRunning(t, eater)
	t.Cleanup(func() { deletePodNow(t, metav1.NamespaceDefault, eater.Name) })
	killed := waitEaterEnded(t, eater.Name)
	peak := eaterPeak(t, s, eater.Name)
	t.Logf("pods' root limit %d MiB, other pods %d MiB, the slice holds %d MiB: the eater %s at %d MiB",
		limit>>20, others>>20, holdMiB, killed, peak>>20)

	if !hog.Running() {
		t.Errorf("the sandbox holding %d MiB of the pool's memory was killed (OOM: %v); the pod that outgrew its request was not the first", holdMiB, hog.OOMKilled())
	}
	// What the pods and the sandboxes held together when the eater was stopped: never more
	// than the pods' root allows (one step of the eater, and the other pods' changes since
	// they were measured, are the slack).
	const slack = 32 << 20
	if held := peak + others + holdMiB<<20; held > limit+slack {
		t.Errorf("the eater reached %d MiB beside %d MiB of other pods and the slice's %d MiB: %d MiB, beyond the pods' root's %d MiB — the pod got memory the pool reserved",
			peak>>20, others>>20, holdMiB, held>>20, limit>>20)
	}
}

// cpuWeights says what weighs the slice against the pods, for a failure's message: the
// cpu.shares of the pods' root, of the slice and of the QoS tiers, the burner's cgroup and
// the machine's load.
func cpuWeights(s *stack.Stack, burner int) string {
	var b strings.Builder
	for _, p := range []string{s.PodRoot, s.NodeCtlCgroup, s.PodRoot + "/burstable", s.PodRoot + "/besteffort"} {
		v, _ := os.ReadFile(filepath.Join(cgroupDir(p, "cpu"), "cpu.shares"))
		fmt.Fprintf(&b, "%s cpu.shares %s, ", p, strings.TrimSpace(string(v)))
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", burner))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "the burner's cgroups %q, load %s", strings.ReplaceAll(strings.TrimSpace(string(cg)), "\n", " "), strings.TrimSpace(string(load)))
	return b.String()
}

// burner is a pod burning cpu.
type burner struct {
	pod     *corev1.Pod
	cpuTime func() (time.Duration, error)
}

// saturate runs a Burstable pod (request saturatorCPU, no limit) burning threads cores until
// t ends.
func saturate(t testing.TB, name string, threads int) burner {
	t.Helper()
	return runBurner(t, loadPod(name, corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(saturatorCPU)}},
		"cpu", strconv.Itoa(threads)))
}

// guaranteedBurner runs a Guaranteed pod of res burning threads cores until t ends.
func guaranteedBurner(t testing.TB, name string, res corev1.ResourceList, threads int) burner {
	t.Helper()
	return runBurner(t, loadPod(name, corev1.ResourceRequirements{Requests: res, Limits: res}, "cpu", strconv.Itoa(threads)))
}

func runBurner(t testing.TB, pod *corev1.Pod) burner {
	t.Helper()
	createRunning(t, pod)
	t.Cleanup(func() { deletePodNow(t, pod.Namespace, pod.Name) })
	got := getPod(t, pod.Namespace, pod.Name)
	return burner{pod: got, cpuTime: func() (time.Duration, error) { return podCPUTime(got) }}
}

// loadPod is a pod of the load image (hack/load) bound to the node, on the host network,
// never restarted.
func loadPod(name string, res corev1.ResourceRequirements, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "load", Image: image.LoadName, ImagePullPolicy: corev1.PullNever,
				Command: append([]string{"/load"}, args...), Resources: res,
			}},
		},
	}
}

// memoryEater is a Burstable pod (request 16Mi, no limit) that takes 16 MiB more, over and
// over, until it is stopped.
func memoryEater(name string) *corev1.Pod {
	return loadPod(name, corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}, "mem", "16")
}

// measureCPU measures, over window, the cpu each of the cpu-time sources used, in
// millicores.
func measureCPU(t testing.TB, window time.Duration, sources ...func() (time.Duration, error)) []int64 {
	t.Helper()
	read := func() []time.Duration {
		out := make([]time.Duration, len(sources))
		for i, src := range sources {
			d, err := src()
			if err != nil {
				t.Fatalf("reading cpu time: %v", err)
			}
			out[i] = d
		}
		return out
	}
	before, t0 := read(), time.Now()
	<-time.After(window) // the measurement's period, not a wait for something to happen
	after, elapsed := read(), time.Since(t0)
	out := make([]int64, len(sources))
	for i := range sources {
		out[i] = int64(after[i]-before[i]) * 1000 / int64(elapsed)
	}
	return out
}

// podCPUTime is the cpu time used by the processes of the pod's containers, found in the
// pod's cgroup below the pods' root.
func podCPUTime(pod *corev1.Pod) (time.Duration, error) {
	dir, err := podCgroupDir(pod, "cpu")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for f := range strings.FieldsSeq(string(b)) {
			pid, _ := strconv.Atoi(f)
			if d, err := nodectltest.ProcessCPUTime(pid); err == nil {
				sum += d
			}
		}
		return nil
	})
	return sum, err
}

// cgroupDir is the directory of the cgroup at path (relative to the hierarchy's root) in
// the controller's hierarchy.
func cgroupDir(path, controller string) string {
	if cgroups.Mode() == cgroups.Unified {
		return filepath.Join("/sys/fs/cgroup", path)
	}
	return filepath.Join("/sys/fs/cgroup", controller, path)
}

// podCgroupDir is the directory of the pod's cgroup in the controller's hierarchy (the
// cgroupfs driver: <pod root>[/burstable|/besteffort]/pod<uid>). A mirror pod's cgroup is
// its static pod's, whose UID the config.mirror annotation carries.
func podCgroupDir(pod *corev1.Pod, controller string) (string, error) {
	uid := pod.UID
	if m := pod.Annotations[corev1.MirrorPodAnnotationKey]; m != "" {
		uid = types.UID(m)
	}
	root := cgroupDir(suite.s.PodRoot, controller)
	for _, tier := range []string{"", "burstable", "besteffort"} {
		dir := filepath.Join(root, tier, "pod"+string(uid))
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no cgroup of pod %s (%s) below %s", pod.Name, uid, root)
}

// memoryUsage is the memory charged to the cgroup whose directory (memory hierarchy) is dir.
func memoryUsage(t testing.TB, dir string) int64 {
	t.Helper()
	file := "memory.usage_in_bytes"
	if cgroups.Mode() == cgroups.Unified {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// podsMemory is the memory charged to the pods bound to the node (but the one named
// except), each read from its cgroup.
func podsMemory(t testing.TB, except string) int64 {
	t.Helper()
	pods, err := kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Name == except || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if dir, err := podCgroupDir(p, "memory"); err == nil { // none: not started, or gone
			sum += memoryUsage(t, dir)
		}
	}
	return sum
}

// shrinkPodRoot restarts kubelet with so much memory reserved for the system that the pods'
// root (kubelet's allocatable memory, before its eviction threshold) holds what the pods
// request and what its cgroup holds now, plus room, and returns its limit. t's cleanup
// restarts kubelet with nothing reserved again.
func shrinkPodRoot(t testing.TB, s *stack.Stack, room int64) int64 {
	t.Helper()
	ctx := context.Background()
	const evictionHard = 100 << 20 // the stack's memory.available threshold
	requests := allocated(t)
	need := max(requests.Memory().Value()+evictionHard, memoryUsage(t, cgroupDir(s.PodRoot, "memory"))) + room
	nodeMem := nodeCapacity(t)
	capacity := nodeMem.Memory().Value()
	reserved := resource.NewQuantity(capacity-need, resource.BinarySI)
	t.Cleanup(func() {
		if err := s.RestartKubelet(ctx, nil); err != nil {
			t.Error(err)
		}
		eventually(t, "the node's allocatable memory back", time.Minute, func() (bool, string) {
			alloc := nodeAllocatable(t)
			a := alloc.Memory().Value()
			return a > need, fmt.Sprintf("allocatable %d MiB", a>>20)
		})
	})
	if err := s.RestartKubelet(ctx, map[string]string{"memory": reserved.String()}); err != nil {
		t.Fatal(err)
	}
	var limit int64
	eventually(t, "kubelet limits the pods' root", time.Minute, func() (bool, string) {
		l := nodectltest.ReadKernelLimits(t, s.PodRoot).MemoryBytes
		limit = l
		return l > 0 && l <= capacity-reserved.Value(), fmt.Sprintf("limit %d MiB", l>>20)
	})
	return limit
}

// waitEaterEnded waits until the memory eater is stopped and says how: OOMKilled by the
// kernel, or Evicted by kubelet.
func waitEaterEnded(t testing.TB, name string) string {
	t.Helper()
	var how string
	eventually(t, "the eater stopped", 2*time.Minute, func() (bool, string) {
		p := getPod(t, metav1.NamespaceDefault, name)
		if p == nil {
			return false, "gone"
		}
		if p.Status.Reason == "Evicted" {
			how = "evicted by kubelet"
			return true, ""
		}
		for _, c := range p.Status.ContainerStatuses {
			if term := c.State.Terminated; term != nil {
				how = "stopped: " + term.Reason
				return true, ""
			}
		}
		return false, podState(p)
	})
	if how != "stopped: OOMKilled" && how != "evicted by kubelet" {
		t.Errorf("the eater %s, want OOMKilled or evicted", how)
	}
	return how
}

// eaterPeak is the most the memory eater said it held, from its log.
func eaterPeak(t testing.TB, s *stack.Stack, name string) int64 {
	t.Helper()
	var peak int64
	for line := range strings.SplitSeq(s.PodLog(metav1.NamespaceDefault, name, 5), "\n") {
		// kubelet's CRI log format: time stream tag message.
		if i := strings.Index(line, "held "); i >= 0 {
			var mib int64
			if _, err := fmt.Sscanf(line[i:], "held %d MiB", &mib); err == nil {
				peak = max(peak, mib<<20)
			}
		}
	}
	if peak == 0 {
		t.Fatalf("the eater's log says nothing it held:\n%s", s.PodLog(metav1.NamespaceDefault, name, 5))
	}
	return peak
}
