package e2e

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// FiguresEnv turns on TestFigures (make e2e-figures sets it).
const FiguresEnv = "SANDBOXPOOL_E2E_FIGURES"

// TestFigures measures, on the real stack, the latencies docs/benchmarks.md reports, over
// repeated runs, and prints them as FIGURE lines. It asserts nothing about the times.
//
//	SANDBOXPOOL_E2E_FIGURES=1 go test -count=1 -v -run TestFigures ./tests/e2e/   (as root, with TEST_ENV)
func TestFigures(t *testing.T) {
	if os.Getenv(FiguresEnv) == "" {
		t.Skip(FiguresEnv + " is not set")
	}
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	// The manifest runs leave the placeholder container in a long restart back-off: the
	// next test starts from a fresh pool.
	t.Cleanup(func() { deleteClass(t) })

	// Class applied → pool Ready, on a node whose node-ctl runs (as on a node joining a
	// class for the first time): the class is deleted between runs, and node-ctl's unit,
	// which the agent stops with the pool, is started again before the next run.
	var ready []time.Duration
	for range 10 {
		deleteClass(t)
		if err := s.NodeCtl.StartUnit(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node-ctl up", 30*time.Second, func() (bool, string) { return nodeCtlState(t) != nil, "" })
		t0 := time.Now()
		if err := k8s.Create(ctx, newClass(resources(baseCPU, baseMemory))); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, v1alpha1.PhaseReady, 2*time.Minute, nil)
		ready = append(ready, time.Since(t0))
		waitSynced(t, baseCPU, baseMemory, time.Minute)
	}
	figure(t, "class applied → pool Ready", ready)

	var mirror, mirrorReady []time.Duration
	for range 10 {
		c, r := deleteMirrorPod(t, mirrorPod(t))
		mirror, mirrorReady = append(mirror, c), append(mirrorReady, r)
		waitSynced(t, baseCPU, baseMemory, time.Minute)
	}
	figure(t, "mirror pod deleted → new mirror pod", mirror)
	figure(t, "mirror pod deleted → new mirror pod Running and Ready", mirrorReady)

	var up, down []time.Duration
	for range 3 {
		for _, step := range []struct {
			mem string
			out *[]time.Duration
		}{{"192Mi", &up}, {baseMemory, &down}} {
			t0 := time.Now()
			setClassResources(t, resources(baseCPU, step.mem))
			waitPhase(t, v1alpha1.PhaseReady, 2*time.Minute, func(p *v1alpha1.SandboxPool) bool {
				r := p.Status.Resize
				return r != nil && r.Status == v1alpha1.ResizeCompleted && r.RequestedMemory != nil && r.RequestedMemory.String() == step.mem
			})
			*step.out = append(*step.out, time.Since(t0))
			waitSynced(t, baseCPU, step.mem, time.Minute)
		}
	}
	figure(t, "resize request → Completed, scale up 128Mi → 192Mi", up)
	figure(t, "resize request → Completed, safe scale down 192Mi → 128Mi", down)

	// Last: each deletion lengthens kubelet's restart back-off of the placeholder container
	// (same pod UID), so the pod's container is not waited for here.
	var restored, back []time.Duration
	for range 10 {
		data, err := os.ReadFile(manifestPath())
		if err != nil {
			t.Fatal(err)
		}
		r, b := deleteManifest(t, data)
		restored, back = append(restored, r), append(back, b)
	}
	figure(t, "manifest deleted → restored by the agent", restored)
	figure(t, "manifest deleted → placeholder sandbox running again (CRI)", back)
}

// figure prints a FIGURE line: p50, min and max of the runs.
func figure(t *testing.T, name string, runs []time.Duration) {
	t.Helper()
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	t.Logf("FIGURE %s: p50 %s (min %s, max %s, %d runs)", name, r(sorted[len(sorted)/2]), r(sorted[0]), r(sorted[len(sorted)-1]), len(runs))
	all := make([]string, len(runs))
	for i, d := range runs {
		all[i] = r(d)
	}
	t.Logf("  runs: %v", all)
}
