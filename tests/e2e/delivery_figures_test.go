package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// DeliveryFiguresEnv turns on TestDeliveryFigures (make bench-delivery sets it).
const DeliveryFiguresEnv = "SANDBOXPOOL_DELIVERY_FIGURES"

// deliveryRuns is how many windows of cpuWindow each arrangement is measured over.
const deliveryRuns = 6

// TestDeliveryFigures measures what the pool's slice delivers on the real one-node stack,
// side by side in one run with what a Guaranteed pod of the same size gets (cpu: in the
// same windows) and with the slice beside the pods' root (where node-ctl's cgroup was before
// the slice moved below it), and prints FIGURE lines:
//
//   - cpu: the cpu a process that wants more than the pool gets while a Burstable pod
//     (request 100m, no limit) burns more cores than the node has;
//   - memory: with the pods' root cut to what runs plus 256 MiB, a Burstable pod (request
//     16Mi, no limit) takes 16 MiB more at a time while the sandbox holds 100 MiB of the
//     pool's 128Mi: who is stopped first, and at what usage.
//
// It asserts nothing about the figures.
//
//	SANDBOXPOOL_DELIVERY_FIGURES=1 go test -count=1 -v -run TestDeliveryFigures ./tests/e2e/   (as root, with TEST_ENV)
func TestDeliveryFigures(t *testing.T) {
	if os.Getenv(DeliveryFiguresEnv) == "" {
		t.Skip(DeliveryFiguresEnv + " is not set")
	}
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })
	pool := wrappers.Resources(baseCPU, baseMemory)
	limits := cgroup.Limits{CPUMilli: pool.Cpu().MilliValue(), MemoryBytes: pool.Memory().Value()}

	// Beside the pods' root: a cgroup with the limits node-ctl gives the slice, applied by
	// the reference node-ctl's own code.
	beside := nodectltest.CgroupPath(t)
	cg, err := cgroup.Open(beside)
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.Apply(limits); err != nil {
		t.Fatal(err)
	}
	capacity := nodeCapacity(t)
	cores := int(capacity.Cpu().Value())

	t.Run("cpu", func(t *testing.T) {
		sat := saturate(t, "saturator", cores+1)
		// The anchor burns in the same windows as each arrangement: what the machine's
		// other work takes from the pods' root is taken from both alike.
		anchor := guaranteedBurner(t, "guaranteed", pool, cores)
		for _, a := range []struct{ name, cgroup string }{
			{"the slice (node-ctl's cgroup below the pods' root)", s.NodeCtlCgroup},
			{"the slice beside the pods' root", beside},
		} {
			b := nodectltest.StartBurner(t, a.cgroup, cores)
			cpuFigure(t, a.name, pool, b.CPUTime, anchor.cpuTime, sat.cpuTime)
			b.Stop()
		}
		deletePodNow(t, anchor.pod.Namespace, anchor.pod.Name)
	})

	t.Run("memory", func(t *testing.T) {
		const holdMiB = 100
		limit := shrinkPodRoot(t, s, 256<<20)
		for _, a := range []struct{ name, cgroup string }{
			{"the slice (node-ctl's cgroup below the pods' root)", s.NodeCtlCgroup},
			{"the slice beside the pods' root", beside},
		} {
			hog := nodectltest.StartHog(t, a.cgroup, holdMiB)
			if err := hog.WaitAllocated(time.Minute); err != nil {
				t.Fatal(err)
			}
			others := podsMemory(t, "")
			how, peak := eatUntilStopped(t)
			memoryFigure(t, a.name, limit, others, holdMiB<<20, how, peak, hog.Running())
			hog.Release()
		}
		g := loadPod("guaranteed", corev1.ResourceRequirements{Requests: pool, Limits: pool}, "mem", "4", strconv.Itoa(holdMiB))
		createRunning(t, g)
		eventually(t, "the Guaranteed pod holds its memory", time.Minute, func() (bool, string) {
			log := s.PodLog(g.Namespace, g.Name, 1)
			return strings.Contains(log, fmt.Sprintf("held %d MiB", holdMiB)), log
		})
		others := podsMemory(t, "")
		how, peak := eatUntilStopped(t)
		gp := getPod(t, g.Namespace, g.Name)
		memoryFigure(t, "a Guaranteed pod of the pool's size", limit, others, 0, how, peak, podReady(gp))
		deletePodNow(t, g.Namespace, g.Name)
	})
}

// cpuFigure measures deliveryRuns windows and prints the median and the least the sandbox
// got, as millicores and as a share of the pool, beside what the Guaranteed pod of the
// pool's size (the anchor) and the saturating pod got in the same windows.
func cpuFigure(t *testing.T, name string, pool corev1.ResourceList, sandbox, anchor, saturator func() (time.Duration, error)) {
	t.Helper()
	var got, anc, sat []int64
	for range deliveryRuns {
		m := measureCPU(t, cpuWindow, sandbox, anchor, saturator)
		got, anc, sat = append(got, m[0]), append(anc, m[1]), append(sat, m[2])
	}
	for _, l := range [][]int64{got, anc, sat} {
		slices.Sort(l)
	}
	p := pool.Cpu().MilliValue()
	share := func(m int64) string { return fmt.Sprintf("%.1f %%", 100*float64(m)/float64(p)) }
	t.Logf("FIGURE cpu under saturation | %s | pool %dm | median %dm (%s) | least %dm (%s) | the Guaranteed pod in the same windows, median %dm (%s), least %dm | the saturating pod, median %dm | %d windows of %s",
		name, p, got[len(got)/2], share(got[len(got)/2]), got[0], share(got[0]), anc[len(anc)/2], share(anc[len(anc)/2]), anc[0], sat[len(sat)/2], len(got), cpuWindow)
}

// memoryFigure prints who was stopped first and at what usage.
func memoryFigure(t *testing.T, name string, limit, others, sandbox int64, how string, peak int64, sandboxAlive bool) {
	t.Helper()
	first := "the co-located pod (" + how + ")"
	if !sandboxAlive {
		first = "the sandbox, and the co-located pod " + how
	}
	t.Logf("FIGURE memory pressure | %s | pods' root %d MiB, other pods %d MiB, sandbox outside the pods %d MiB | stopped first: %s at %d MiB | pods and sandboxes then held %d MiB",
		name, limit>>20, others>>20, sandbox>>20, first, peak>>20, (peak+others+sandbox)>>20)
}

// eatUntilStopped runs the memory eater until kubelet or the kernel stops it, and returns
// how and the most it held.
func eatUntilStopped(t *testing.T) (string, int64) {
	t.Helper()
	eater := memoryEater("eater")
	createRunning(t, eater)
	how := waitEaterEnded(t, eater.Name)
	peak := eaterPeak(t, suite.s, eater.Name)
	deletePodNow(t, metav1.NamespaceDefault, eater.Name)
	return how, peak
}
