package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
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
		if err := k8s.Create(ctx, newClass(wrappers.Resources(baseCPU, baseMemory))); err != nil {
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

	// Resizes with the lock watcher on: the scheduler's count of the lock (every change of
	// the mirror pods, by watch), kubelet's (its /pods, every 10 ms) and the pool's phase.
	base := wrappers.Resources(baseCPU, baseMemory)
	type resizeRun struct {
		name   string
		to     corev1.ResourceList
		change func()
	}
	var gaps = map[string][]watchResult{}
	var took = map[string][]time.Duration{}
	runs := []resizeRun{
		{"scale up 500m/128Mi → 700m/192Mi", wrappers.Resources("700m", "192Mi"), nil},
		{"scale down 700m/192Mi → 500m/128Mi", base, nil},
		{"template change (an annotation)", base, nil},
	}
	for i := range 5 {
		for _, r := range runs {
			old := support.Requests(mirrorPods(t)...)
			w := watchLock(t, old, r.to)
			t0 := time.Now()
			if strings.HasPrefix(r.name, "template") {
				setClassAnnotation(t, "e2e.sandbox-pool.io/run", fmt.Sprint(i))
			} else {
				setClassResources(t, r.to)
			}
			waitSynced(t, r.to.Cpu().String(), r.to.Memory().String(), time.Minute)
			if strings.HasPrefix(r.name, "template") {
				eventually(t, "the template change applied", time.Minute, func() (bool, string) {
					pods := mirrorPods(t)
					return len(pods) == 1 && pods[0].Annotations["e2e.sandbox-pool.io/run"] == fmt.Sprint(i) && podReady(&pods[0]), ""
				})
			}
			took[r.name] = append(took[r.name], time.Since(t0))
			gaps[r.name] = append(gaps[r.name], w.check(r.name))
		}
	}
	// Without room for a second copy: a regular pod takes all the cpu but 100m.
	fill := free(t)[corev1.ResourceCPU]
	fill.Sub(resource.MustParse("100m"))
	createRunning(t, regularPod("figures-filler", corev1.ResourceList{corev1.ResourceCPU: fill, corev1.ResourceMemory: resource.MustParse("16Mi")}))
	for range 5 {
		for _, to := range []corev1.ResourceList{wrappers.Resources("400m", baseMemory), base} {
			name := "scale down 500m → 400m cpu, no room for a second copy"
			if to.Cpu().Cmp(resource.MustParse(baseCPU)) == 0 {
				name = "scale up 400m → 500m cpu, into the room the scale-down freed"
			}
			w := watchLock(t, support.Requests(mirrorPods(t)...), to)
			t0 := time.Now()
			setClassResources(t, to)
			waitSynced(t, to.Cpu().String(), baseMemory, time.Minute)
			took[name] = append(took[name], time.Since(t0))
			gaps[name] = append(gaps[name], w.check(name))
		}
	}
	deletePodNow(t, metav1.NamespaceDefault, "figures-filler")
	// With the room back, the growth's piece is folded into one.
	eventually(t, "one placeholder pod again", time.Minute, func() (bool, string) {
		return len(pieceFiles()) == 1, fmt.Sprintf("%d manifests", len(pieceFiles()))
	})
	waitSynced(t, baseCPU, baseMemory, time.Minute)
	for _, name := range slices.Sorted(maps.Keys(gaps)) {
		resizeFigure(t, name, took[name], gaps[name])
	}

	var restored, back []time.Duration
	for range 10 {
		r, b := deleteManifest(t)
		restored, back = append(restored, r), append(back, b)
		waitSynced(t, baseCPU, baseMemory, time.Minute)
	}
	figure(t, "manifest deleted → the lock restored by a new placeholder pod", restored)
	figure(t, "manifest deleted → the new placeholder sandbox running (CRI)", back)
}

// resizeFigure prints a FIGURE line for a resize: how long it took, and over all runs the
// longest interval each count of the lock was below min(old, new) and the pool not Ready,
// with the readings behind them.
func resizeFigure(t *testing.T, name string, took []time.Duration, runs []watchResult) {
	t.Helper()
	figure(t, "resize "+name+" → synced", took)
	for _, v := range []string{viewScheduler, viewKubelet, viewReady} {
		var longest, maxStep time.Duration
		readings, bad := 0, 0
		for _, r := range runs {
			x := r.view(v)
			longest, maxStep = max(longest, x.gap), max(maxStep, x.maxStep)
			readings, bad = readings+x.samples, bad+x.bad
		}
		what := "below min(old, new)"
		if v == viewReady {
			what = "not Ready"
		}
		how := fmt.Sprintf("%d of %d samples, at most %s apart", bad, readings, maxStep.Round(time.Millisecond))
		if v == viewScheduler {
			how = fmt.Sprintf("%d of %d changes, read by watch", bad, readings)
		}
		t.Logf("FIGURE %s: %s %s longest %s (%s, %d runs)", name, v, what, longest.Round(time.Millisecond), how, len(runs))
	}
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
