package agent

import (
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func rl(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

const gi = 1 << 30

func TestPlanResize(t *testing.T) {
	for _, tc := range []struct {
		name         string
		in           resizeInput
		wantManifest corev1.ResourceList
		wantNodeCtl  corev1.ResourceList // nil: leave node-ctl alone
		synced       bool
		deferred     bool
	}{
		{name: "first apply waits for the pod",
			in:           resizeInput{Desired: rl("2", "4Gi")},
			wantManifest: rl("2", "4Gi")},
		{name: "first apply once the pod locks the pool",
			in:           resizeInput{Desired: rl("2", "4Gi"), Pod: rl("2", "4Gi")},
			wantManifest: rl("2", "4Gi"), wantNodeCtl: rl("2", "4Gi")},
		{name: "in sync",
			in:           resizeInput{Desired: rl("2", "4Gi"), Applied: rl("2000m", "4096Mi"), Pod: rl("2", "4Gi")},
			wantManifest: rl("2", "4Gi"), synced: true},
		{name: "scale up: manifest first, node-ctl waits for the bigger pod",
			in:           resizeInput{Desired: rl("4", "8Gi"), Applied: rl("2", "4Gi"), Pod: rl("2", "4Gi")},
			wantManifest: rl("4", "8Gi")},
		{name: "scale up: the bigger pod runs, node-ctl grows",
			in:           resizeInput{Desired: rl("4", "8Gi"), Applied: rl("2", "4Gi"), Pod: rl("4", "8Gi")},
			wantManifest: rl("4", "8Gi"), wantNodeCtl: rl("4", "8Gi")},
		{name: "scale up while the pod is being rebuilt (no pod): node-ctl stays",
			in:           resizeInput{Desired: rl("4", "8Gi"), Applied: rl("2", "4Gi")},
			wantManifest: rl("4", "8Gi")},
		{name: "safe scale down: node-ctl first, the manifest keeps the old size",
			in:           resizeInput{Desired: rl("1", "2Gi"), Applied: rl("2", "4Gi"), Pod: rl("2", "4Gi"), AllocatedMemory: gi, Watermark: 0.85},
			wantManifest: rl("2", "4Gi"), wantNodeCtl: rl("1", "2Gi")},
		{name: "safe scale down: node-ctl shrunk, now the manifest",
			in:           resizeInput{Desired: rl("1", "2Gi"), Applied: rl("1", "2Gi"), Pod: rl("2", "4Gi"), AllocatedMemory: gi, Watermark: 0.85},
			wantManifest: rl("1", "2Gi")},
		{name: "unsafe scale down: deferred, nothing moves but cpu",
			in:           resizeInput{Desired: rl("1", "2Gi"), Applied: rl("2", "4Gi"), Pod: rl("2", "4Gi"), AllocatedMemory: 1900 << 20, Watermark: 0.85},
			wantManifest: rl("2", "4Gi"), wantNodeCtl: rl("1", "4Gi"), deferred: true},
		{name: "scale down at exactly the watermark is safe",
			in:           resizeInput{Desired: rl("2", "2Gi"), Applied: rl("2", "4Gi"), Pod: rl("2", "4Gi"), AllocatedMemory: 85 * 2 * gi / 100, Watermark: 0.85},
			wantManifest: rl("2", "4Gi"), wantNodeCtl: rl("2", "2Gi")},
		{name: "mixed: cpu up waits for the pod, memory down goes first",
			in:           resizeInput{Desired: rl("4", "2Gi"), Applied: rl("2", "4Gi"), Pod: rl("2", "4Gi"), AllocatedMemory: gi, Watermark: 0.85},
			wantManifest: rl("4", "4Gi"), wantNodeCtl: rl("2", "2Gi")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planResize(tc.in)
			if !equalResources(p.Manifest, tc.wantManifest) {
				t.Errorf("manifest %v, want %v", p.Manifest, tc.wantManifest)
			}
			if !equalResources(p.NodeCtl, tc.wantNodeCtl) {
				t.Errorf("node-ctl %v, want %v", p.NodeCtl, tc.wantNodeCtl)
			}
			if p.Synced != tc.synced || p.Deferred != tc.deferred {
				t.Errorf("synced %v deferred %v, want %v %v", p.Synced, p.Deferred, tc.synced, tc.deferred)
			}
			if tc.deferred && (!strings.Contains(p.Reason, "85%") || !strings.Contains(p.Reason, "Gi ")) {
				t.Errorf("deferred reason %q does not give the watermark", p.Reason)
			}
			// The invariant: what node-ctl will run never exceeds what the pod locks now
			// (when node-ctl changes) nor what the manifest asks.
			for _, r := range staged {
				if p.NodeCtl != nil {
					nc := p.NodeCtl[r]
					if m := p.Manifest[r]; nc.Cmp(m) > 0 {
						t.Errorf("%s: node-ctl %s above the manifest %s", r, nc.String(), m.String())
					}
					if pod, ok := tc.in.Pod[r]; ok && nc.Cmp(pod) > 0 {
						t.Errorf("%s: node-ctl %s above the running pod %s", r, nc.String(), pod.String())
					}
				}
				if a, ok := tc.in.Applied[r]; ok {
					if m := p.Manifest[r]; m.Cmp(a) < 0 {
						t.Errorf("%s: manifest %s below what node-ctl applied %s", r, m.String(), a.String())
					}
				}
			}
		})
	}
}

// TestResizeWalk drives a whole scale-up and safe scale-down through planResize, applying
// each step the way the agent and kubelet would, and checks the invariant at every step.
func TestResizeWalk(t *testing.T) {
	applied, pod := rl("2", "4Gi"), rl("2", "4Gi")
	for _, desired := range []corev1.ResourceList{rl("4", "8Gi"), rl("1", "1Gi"), rl("3", "3Gi")} {
		for step := 0; ; step++ {
			if step > 6 {
				t.Fatalf("resize to %v did not converge", desired)
			}
			p := planResize(resizeInput{Desired: desired, Applied: applied, Pod: pod, AllocatedMemory: 100 << 20, Watermark: 0.85})
			if p.Synced {
				break
			}
			if p.NodeCtl != nil {
				applied = p.NodeCtl
			}
			pod = p.Manifest // kubelet rebuilds the pod from the manifest
			for _, r := range staged {
				a, q := applied[r], pod[r]
				if q.Cmp(a) < 0 {
					t.Fatalf("step %d to %v: pod requests %s below node-ctl's %s", step, desired, q.String(), a.String())
				}
			}
		}
		if !equalResources(applied, desired) || !equalResources(pod, desired) {
			t.Fatalf("converged to node-ctl %v pod %v, want %v", applied, pod, desired)
		}
	}
}

func TestResizeState(t *testing.T) {
	want := rl("2", "4Gi")
	inProgress := resizeState(nil, false, resizePlan{}, want)
	if inProgress == nil || inProgress.Status != v1alpha1.ResizeInProgress || inProgress.RequestedMemory.String() != "4Gi" {
		t.Fatalf("unsynced plan: %+v, want InProgress with the requested size", inProgress)
	}
	done := resizeState(inProgress, false, resizePlan{Synced: true}, want)
	if done == nil || done.Status != v1alpha1.ResizeCompleted {
		t.Fatalf("synced after InProgress: %+v, want Completed", done)
	}
	if again := resizeState(done, false, resizePlan{Synced: true}, want); again != done {
		t.Errorf("synced after Completed changed the status: %+v", again)
	}
	if first := resizeState(nil, true, resizePlan{}, want); first != nil {
		t.Errorf("the first apply is not a resize, got %+v", first)
	}
	if d := resizeState(nil, false, resizePlan{Deferred: true, Reason: "r"}, want); d.Status != v1alpha1.ResizeDeferred || d.DeferredReason != "r" {
		t.Errorf("deferred: %+v", d)
	}
}

func TestReadableBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 1000: "1000", 1024: "1Ki", 512 << 20: "512Mi", 7378697629: "6.87Gi",
		85 * (2 << 30) / 100: "1.7Gi", 3 << 40: "3Ti",
	} {
		if got := readableBytes(n); got != want {
			t.Errorf("readableBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
