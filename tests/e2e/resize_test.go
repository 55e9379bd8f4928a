package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// invariant watches, every 20 ms until stopped, SPEC §3.5's invariant on the real parts:
// the placeholder pod's requests — as the API server has the mirror pod (what the scheduler
// counts) and as the manifest on disk says (what kubelet admits) — are never below what
// node-ctl has applied. It records each distinct state it sees, to show the ordering.
type invariant struct {
	t    *testing.T
	stop chan struct{}
	done chan struct{}
	once sync.Once // closes stop

	mu      sync.Mutex // guards the fields below
	samples int
	bad     []string
	steps   []string
}

func watchInvariant(t *testing.T) *invariant {
	m := &invariant{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	t.Cleanup(m.halt) // a test that fails before check
	return m
}

// halt stops the watch (once) and waits for it.
func (m *invariant) halt() {
	m.once.Do(func() { close(m.stop) })
	<-m.done
}

func (m *invariant) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		// The requests are read between two reads of what node-ctl applies: a request below
		// both is below what node-ctl applied at the moment it was read, whichever of the
		// two that was (a resize may move node-ctl between the reads).
		before := m.applied()
		var podReq, fileReq corev1.ResourceList
		if f, err := manifest.Read(manifestPath()); err == nil {
			fileReq = f.Resources
		}
		pod, err := findMirrorPod()
		if err != nil {
			continue
		}
		if pod != nil {
			podReq = pod.Spec.Containers[0].Resources.Requests
		}
		after := m.applied()
		if before == nil || after == nil {
			continue
		}
		m.mu.Lock()
		m.samples++
		applied := corev1.ResourceList{}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			a, b := before[r], after[r]
			if b.Cmp(a) < 0 {
				a = b
			}
			applied[r] = a
			for what, req := range map[string]corev1.ResourceList{"mirror pod": podReq, "manifest": fileReq} {
				if q, ok := req[r]; ok && q.Cmp(a) < 0 {
					m.bad = append(m.bad, fmt.Sprintf("%s: %s requests %s < node-ctl applied %s", r, what, q.String(), a.String()))
				}
			}
		}
		step := fmt.Sprintf("node-ctl %s, manifest %s, mirror pod %s", applied.Memory(), memOf(fileReq), memOf(podReq))
		if len(m.steps) == 0 || m.steps[len(m.steps)-1] != step {
			m.steps = append(m.steps, step)
		}
		m.mu.Unlock()
	}
}

// applied is what node-ctl applies (cpu and memory), nil when it answers nothing applied.
func (m *invariant) applied() corev1.ResourceList {
	st := nodeCtlState(m.t)
	if st == nil || !st.Applied() {
		return nil
	}
	out := corev1.ResourceList{}
	for _, r := range []string{api.ResourceCPU, api.ResourceMemory} {
		out[corev1.ResourceName(r)] = resource.MustParse(st.AppliedResources[r])
	}
	return out
}

func memOf(l corev1.ResourceList) string {
	if l == nil {
		return "(none)"
	}
	return l.Memory().String()
}

// check stops the watch and fails t if the invariant was broken or never sampled.
func (m *invariant) check(step string) {
	m.t.Helper()
	m.halt()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.samples == 0 {
		m.t.Fatalf("%s: the invariant was never sampled", step)
	}
	m.t.Logf("%s: %d samples, %d below what node-ctl applied; memory as observed:\n    %s", step, m.samples, len(m.bad), strings.Join(m.steps, "\n    "))
	if len(m.bad) > 0 {
		m.t.Fatalf("%s: invariant broken in %d of %d samples, e.g. %s", step, len(m.bad), m.samples, m.bad[0])
	}
}

// TestResize resizes the class's memory up, safely down, and down while a real process
// holds memory in node-ctl's cgroup (deferred, then completed once it is freed), watching
// the invariant requests ≥ node-ctl applied throughout.
func TestResize(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	t.Cleanup(func() { ensureClass(t) })

	m := watchInvariant(t)
	t0 := time.Now()
	setClassResources(t, resources(baseCPU, "192Mi"))
	waitSynced(t, baseCPU, "192Mi", 2*time.Minute)
	m.check(fmt.Sprintf("scale up 128Mi → 192Mi (%s)", time.Since(t0).Round(time.Millisecond)))
	if r := getPool(t).Status.Resize; r == nil || r.Status != v1alpha1.ResizeCompleted || r.RequestedMemory.String() != "192Mi" {
		t.Errorf("resize status after the scale-up: %+v", r)
	}

	m = watchInvariant(t)
	t0 = time.Now()
	setClassResources(t, resources(baseCPU, "160Mi"))
	waitSynced(t, baseCPU, "160Mi", 2*time.Minute)
	m.check(fmt.Sprintf("safe scale down 192Mi → 160Mi (%s)", time.Since(t0).Round(time.Millisecond)))

	// 120 MiB in use is above 85 % of 128Mi (108.8 MiB): the downscale waits.
	hog := nodectltest.StartHog(t, s.NodeCtlCgroup, 120)
	if err := hog.WaitAllocated(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The agent decides with the usage it last polled: wait until it has seen the hog
	// (it reports the figure in status.poolInfo once it moved by 16 MiB or more).
	eventually(t, "the agent sees the memory in use", 10*time.Second, func() (bool, string) {
		p := getPool(t)
		return p.Status.PoolInfo != nil && ptr.Deref(p.Status.PoolInfo.AllocatedMemoryBytes, 0) > 110<<20, fmt.Sprintf("%+v", p.Status.PoolInfo)
	})
	m = watchInvariant(t)
	t0 = time.Now()
	setClassResources(t, resources(baseCPU, "128Mi"))
	waitPhase(t, v1alpha1.PhaseReady, 30*time.Second, func(p *v1alpha1.SandboxPool) bool {
		r := p.Status.Resize
		return r != nil && r.Status == v1alpha1.ResizeDeferred && strings.Contains(r.DeferredReason, "85%") &&
			condIs(p, v1alpha1.ConditionResizeDeferred, metav1.ConditionTrue)
	})
	t.Logf("deferred: %q", getPool(t).Status.Resize.DeferredReason)
	if pod := mirrorPod(t); pod == nil || pod.Spec.Containers[0].Resources.Requests.Memory().String() != "160Mi" {
		t.Errorf("the deferred downscale changed the pod: %s", podState(pod))
	}
	eventually(t, "a Warning event once deferred for longer than 3 s", 30*time.Second, func() (bool, string) {
		evs := eventsFor(t, poolName)
		for _, e := range evs {
			if strings.HasPrefix(e, "Warning/ResizeDeferredTooLong") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "; ")
	})
	// Ready all along: a deferred downscale alone keeps the pool Ready (SPEC §3.4 rule 10).
	if p := getPool(t); p.Status.Phase != v1alpha1.PhaseReady {
		t.Errorf("phase while deferred: %s", describe(p))
	}
	hog.Release()
	waitSynced(t, baseCPU, "128Mi", 2*time.Minute)
	m.check(fmt.Sprintf("deferred scale down 160Mi → 128Mi, completed once the memory was freed (%s)", time.Since(t0).Round(time.Millisecond)))
}
