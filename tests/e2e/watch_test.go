package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
)

// sampleEvery is how often each of the lock watcher's views is read.
const sampleEvery = 10 * time.Millisecond

// lockWatch watches the pool's lock on the real parts until stopped, in three views side by
// side:
//   - the scheduler's, from a watch of the pool's mirror pods (as the scheduler's informer
//     sees them, every change): the requests of every mirror pod that has not failed (a pod
//     being deleted still counts: the scheduler counts it until it is gone);
//   - kubelet's, read every sampleEvery from kubelet's /pods: the requests of the pool's
//     pods it lists and has not failed (it lists a refused static pod as Failed);
//   - the pool's phase, read every sampleEvery.
//
// It observes the step it watches from before it to after it: watchLock returns only once
// kubelet's view has been read and the scheduler's listed (its watch runs from there), before
// the test starts the step, and check waits for a reading of kubelet's view begun after the
// step; a view that was not read on both sides of the step fails the test.
//
// No pod or a Failed pod counts as nothing. A read that is not answered (kubelet or the API
// server restarting) is no sample: while kubelet is down it admits nothing, and while the
// API server is down nothing is scheduled; nor is a restarting kubelet's list, from the
// moment it is told (kubeletRestarts) until the new kubelet shows the pool's pods. Each lock sample is checked against
// what node-ctl applies (read just before and after it: the lock must cover the smaller) and
// against floor, min(old, new) of the resize under watch. The watcher records the longest
// interval each lock was below floor (from the last sample at or above it to the next one),
// and the longest the pool was not Ready.
type lockWatch struct {
	t     testing.TB
	floor corev1.ResourceList
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	mu    sync.Mutex // guards the views and kubeletStarting
	views map[string]*view
	// kubeletRestart: kubelet is restarting (restartStopping until it stops answering,
	// restartStarting until it lists a pod of the pool again, restartNone). A kubelet that
	// starts serves /pods before it has read its manifest directory; its count means nothing
	// until it has (it admits the static pods then).
	kubeletRestart int
}

const (
	restartNone = iota
	restartStopping
	restartStarting
)

// kubeletRestarts tells the watch that kubelet is about to restart.
func (w *lockWatch) kubeletRestarts() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kubeletRestart = restartStopping
}

// view is one series of samples.
type view struct {
	samples, bad int
	// lastStart is when the reads of the last sample began.
	lastStart time.Time
	// maxStep is the longest time between two samples.
	maxStep time.Duration
	// last is the time of the last sample, lastGood of the last one at or above the floor
	// (or Ready), badSince of the first of the current run below it (zero when none).
	last, lastGood, badSince time.Time
	// longest is the longest run below the floor (or not Ready), measured from the last good
	// sample before it to the first good one after it.
	longest time.Duration
	// aboveNodeCtl counts samples where node-ctl applied more than the lock held.
	aboveNodeCtl int
	// unread counts reads that were not answered.
	unread int
	// runs counts the runs of samples below the floor.
	runs    int
	example string
}

func (v *view) record(start, at time.Time, good bool, why string) {
	v.samples++
	v.lastStart = start
	if !v.last.IsZero() {
		v.maxStep = max(v.maxStep, at.Sub(v.last))
	}
	v.last = at
	switch {
	case good:
		if !v.badSince.IsZero() && !v.lastGood.IsZero() {
			v.longest = max(v.longest, at.Sub(v.lastGood))
		}
		v.badSince, v.lastGood = time.Time{}, at
	default:
		v.bad++
		if v.badSince.IsZero() {
			v.runs++
			v.badSince = at
			if v.example == "" {
				v.example = why
			}
		}
	}
}

// gap is the longest interval below the floor, a run that has not ended included.
func (v *view) gap(now time.Time) time.Duration {
	g := v.longest
	if !v.badSince.IsZero() {
		from := v.lastGood
		if from.IsZero() {
			from = v.badSince
		}
		g = max(g, now.Sub(from))
	}
	return g
}

const (
	viewScheduler = "scheduler"
	viewKubelet   = "kubelet"
	viewReady     = "Ready"
)

// watchLock starts a watch of a resize from old to next (nil, nil: no floor, only node-ctl).
func watchLock(t testing.TB, old, next corev1.ResourceList) *lockWatch {
	w := &lockWatch{t: t, stop: make(chan struct{}), views: map[string]*view{
		viewScheduler: {}, viewKubelet: {}, viewReady: {},
	}}
	if old != nil && next != nil {
		w.floor = corev1.ResourceList{}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			o, n := old[r], next[r]
			if n.Cmp(o) < 0 {
				o = n
			}
			w.floor[r] = o
		}
	}
	w.wg.Add(2)
	go w.sampleKubelet()
	go w.watchScheduler()
	w.wg.Add(1)
	go w.sampleReady()
	t.Cleanup(w.halt)
	eventually(t, "the lock watcher's first readings", 30*time.Second, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		k, sc := w.views[viewKubelet], w.views[viewScheduler]
		return k.samples > 0 && sc.samples > 0, fmt.Sprintf("kubelet %d readings (%d unanswered), scheduler %d", k.samples, k.unread, sc.samples)
	})
	return w
}

func (w *lockWatch) tick() bool {
	select {
	case <-w.stop:
		return false
	case <-time.After(sampleEvery):
		return true
	}
}

func (w *lockWatch) sampleKubelet() {
	defer w.wg.Done()
	for w.tick() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		before := appliedNow(ctx)
		pods, err := kubeletPods(ctx)
		after := appliedNow(ctx)
		cancel()
		live := livePoolPods(pods)
		w.mu.Lock()
		switch {
		case w.kubeletRestart == restartStopping && err != nil:
			w.kubeletRestart = restartStarting
		case w.kubeletRestart == restartStarting && err == nil && len(live) > 0:
			w.kubeletRestart = restartNone
		}
		skip := err != nil || w.kubeletRestart != restartNone
		if skip {
			w.views[viewKubelet].unread++
		}
		w.mu.Unlock()
		if !skip {
			w.judge(viewKubelet, start, time.Now(), support.Requests(live...), smaller(before, after), podsSeen(pods))
		}
	}
}

// watchScheduler follows the pool's mirror pods with a watch from a list and judges the lock
// after every change.
func (w *lockWatch) watchScheduler() {
	defer w.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-w.stop; cancel() }()
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelPoolName + "=" + naming.LabelValue(poolName)}
	for ctx.Err() == nil {
		list, err := kube.CoreV1().Pods(v1alpha1.DefaultPodNamespace).List(ctx, sel)
		if err != nil {
			w.mu.Lock()
			w.views[viewScheduler].unread++
			w.mu.Unlock()
			w.tick()
			continue
		}
		pods := map[types.UID]corev1.Pod{}
		for _, p := range list.Items {
			pods[p.UID] = p
		}
		w.judgePods(ctx, pods)
		opts := sel
		opts.ResourceVersion, opts.AllowWatchBookmarks = list.ResourceVersion, false
		wi, err := kube.CoreV1().Pods(v1alpha1.DefaultPodNamespace).Watch(ctx, opts)
		if err != nil {
			continue
		}
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				break // an error event: list again
			}
			if ev.Type == watch.Deleted {
				delete(pods, p.UID)
			} else {
				pods[p.UID] = *p
			}
			w.judgePods(ctx, pods)
		}
		wi.Stop()
	}
}

func (w *lockWatch) judgePods(ctx context.Context, pods map[types.UID]corev1.Pod) {
	var live []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	start := time.Now()
	c, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var seen []corev1.Pod
	for _, p := range pods {
		seen = append(seen, p)
	}
	w.judge(viewScheduler, start, time.Now(), support.Requests(live...), appliedNow(c), podsSeen(seen))
}

// podsSeen names the pool's pods among pods with their phases, for a failure message.
func podsSeen(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		if p.Labels[v1alpha1.LabelPoolName] == naming.LabelValue(poolName) {
			parts = append(parts, p.Name+":"+string(p.Status.Phase))
		}
	}
	return "pods " + strings.Join(parts, " ")
}

// judge records one reading of a lock against the floor and what node-ctl applies.
func (w *lockWatch) judge(name string, start, at time.Time, lock, applied corev1.ResourceList, seen string) {
	good, why := true, ""
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q := lock[r]
		if f, ok := w.floor[r]; ok && q.Cmp(f) < 0 {
			good, why = false, fmt.Sprintf("%s %s below min(old, new) %s (%s)", r, q.String(), f.String(), seen)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.views[name]
	v.record(start, at, good, why)
	for r, a := range applied {
		if q := lock[r]; q.Cmp(a) < 0 {
			v.aboveNodeCtl++
			if v.example == "" {
				v.example = fmt.Sprintf("%s: node-ctl applies %s, the lock holds %s (%s)", r, a.String(), q.String(), seen)
			}
		}
	}
}

func (w *lockWatch) sampleReady() {
	defer w.wg.Done()
	for w.tick() {
		var p v1alpha1.SandboxPool
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := k8s.Get(ctx, poolKey, &p)
		cancel()
		at := time.Now()
		w.mu.Lock()
		w.views[viewReady].record(start, at, err == nil && p.Status.Phase == v1alpha1.PhaseReady, phaseOf(&p, at, err))
		w.mu.Unlock()
	}
}

// halt stops the watch (once) and waits for it.
func (w *lockWatch) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// result stops the watch and returns its figures.
func (w *lockWatch) result() watchResult {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	r := watchResult{}
	for name, v := range w.views {
		r.views = append(r.views, viewResult{name: name, samples: v.samples, bad: v.bad, gap: v.gap(now), maxStep: v.maxStep,
			aboveNodeCtl: v.aboveNodeCtl, unread: v.unread, runs: v.runs, example: v.example})
	}
	return r
}

type watchResult struct{ views []viewResult }

type viewResult struct {
	name                                     string
	samples, bad, aboveNodeCtl, unread, runs int
	gap, maxStep                             time.Duration
	example                                  string
}

func (r watchResult) view(name string) viewResult {
	for _, v := range r.views {
		if v.name == name {
			return v
		}
	}
	return viewResult{}
}

func (r watchResult) String() string {
	var parts []string
	for _, name := range []string{viewScheduler, viewKubelet, viewReady} {
		v := r.view(name)
		what := "below min(old, new)"
		if name == viewReady {
			what = "not Ready"
		}
		s := fmt.Sprintf("%s: %d readings (max %s apart), %d %s, longest %s",
			name, v.samples, v.maxStep.Round(time.Millisecond), v.bad, what, v.gap.Round(time.Millisecond))
		if v.unread > 0 {
			s += fmt.Sprintf(", %d reads unanswered", v.unread)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// check waits for a reading of kubelet's lock after the step, stops the watch and fails the
// test if either lock fell below the floor or below what node-ctl applied. It returns the
// figures.
func (w *lockWatch) check(step string) watchResult { return w.checkWindows(step, 0) }

// checkWindows is check, but lets kubelet's count dip below the floor (and node-ctl) in up
// to kubeletWindows separate runs of samples: the replacement on a node without room for
// both pods removes the old ones and writes the new one in one instant, and kubelet takes
// the two as consecutive updates (docs/agent.md, "What is left").
func (w *lockWatch) checkWindows(step string, kubeletWindows int) watchResult {
	w.t.Helper()
	end := time.Now()
	eventually(w.t, step+": a reading of kubelet's lock after the step", 30*time.Second, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		v := w.views[viewKubelet]
		return v.lastStart.After(end), fmt.Sprintf("%d readings, %d unanswered, none begun since the step ended", v.samples, v.unread)
	})
	r := w.result()
	w.t.Logf("%s: %s", step, r)
	for _, name := range []string{viewScheduler, viewKubelet} {
		v := r.view(name)
		if v.samples == 0 {
			w.t.Fatalf("%s: the %s lock was never sampled", step, name)
		}
		allowed := 0
		if name == viewKubelet {
			allowed = kubeletWindows
		}
		if v.runs > allowed || (v.aboveNodeCtl > 0 && allowed == 0) {
			w.t.Fatalf("%s: the %s lock was below min(old, new) in %d of %d samples (%d runs, %d allowed) and below node-ctl in %d, e.g. %s",
				step, name, v.bad, v.samples, v.runs, allowed, v.aboveNodeCtl, v.example)
		}
		if v.runs > 0 {
			w.t.Logf("%s: the %s lock dipped in %d run(s) (%d samples, longest %s)", step, name, v.runs, v.bad, v.gap)
		}
	}
	return r
}

// poolKey is the pool's key.
var poolKey = types.NamespacedName{Name: poolName}

// kubeletLock is the pool's lock as kubelet counts it: its /pods.
func kubeletLock(ctx context.Context) (corev1.ResourceList, error) {
	pods, err := kubeletPods(ctx)
	if err != nil {
		return nil, err
	}
	return support.Requests(livePoolPods(pods)...), nil
}

// livePoolPods are the pool's pods among pods that have not failed or succeeded.
func livePoolPods(pods []corev1.Pod) []corev1.Pod {
	var live []corev1.Pod
	for _, p := range pods {
		if p.Labels[v1alpha1.LabelPoolName] == naming.LabelValue(poolName) &&
			p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	return live
}

// kubeletPods reads kubelet's /pods on its read-only port.
func kubeletPods(ctx context.Context) ([]corev1.Pod, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, suite.s.KubeletPodsURL(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet /pods: %s", resp.Status)
	}
	var l corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// appliedNow is what node-ctl applies (cpu and memory), nil when it answers nothing.
func appliedNow(ctx context.Context) corev1.ResourceList {
	st, err := suite.s.NodeCtlClient().State(ctx)
	if err != nil || !st.Applied() {
		return nil
	}
	out := corev1.ResourceList{}
	for _, r := range []string{api.ResourceCPU, api.ResourceMemory} {
		q, err := resource.ParseQuantity(st.AppliedResources[r])
		if err != nil {
			return nil
		}
		out[corev1.ResourceName(r)] = q
	}
	return out
}

// smaller is the smaller of a and b by resource; nil when either is nil.
func smaller(a, b corev1.ResourceList) corev1.ResourceList {
	if a == nil || b == nil {
		return nil
	}
	out := corev1.ResourceList{}
	for r, q := range a {
		if o, ok := b[r]; ok && o.Cmp(q) < 0 {
			q = o
		}
		out[r] = q
	}
	return out
}

// phaseOf says what a reading of the pool's phase found, with its conditions, for a
// failure message.
func phaseOf(p *v1alpha1.SandboxPool, at time.Time, err error) string {
	if err != nil {
		return at.Format("15:04:05.000") + ": " + err.Error()
	}
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, c.Type+"="+string(c.Status)+"("+c.Reason+")")
	}
	return at.Format("15:04:05.000") + ": phase " + string(p.Status.Phase) + " " + strings.Join(conds, " ")
}
