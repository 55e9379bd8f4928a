package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// A status writer: a second node, with no kubelet, whose "agent" is the test — it renews
// the pool's Lease as the node's Lease identity and server-side applies the agent's status
// as system:node:<node> every writeEvery, each write carrying the next number in
// status.poolInfo.allocatedMemoryBytes. Its pool is Ready as long as the controller and the
// webhook do their part, so it shows what the cluster half's faults and rollouts do to the
// writes of the nodes: every error a write gets (with failurePolicy Fail, the webhook not
// answering is one), and — from a watch — any write that was lost (the number going back)
// or the pool leaving Ready.

const (
	writerNode  = "e2e-writer"
	writerClass = "e2e-writer"
	writeEvery  = 100 * time.Millisecond
	// writerFieldManager is the test's field manager for the agent's status fields.
	writerFieldManager = "e2e-status-writer"
)

var writerPool = naming.PoolName(writerNode)

type statusWriter struct {
	t    testing.TB
	node client.Client         // system:node:<writerNode>
	kube *kubernetes.Clientset // the node's Lease identity
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	written  int64      // the last number written successfully
	attempts int
	errs     []string // each failed write: when and why
	// From the watch: the last number seen, the times it went back, and the samples where
	// the pool was not Ready (with the phases seen).
	seen       int64
	regressed  []string
	notReady   int
	notReadyAs map[string]int
}

// startStatusWriter creates the writer's Node and class, waits until its pool is Ready,
// and starts writing; stop it with halt. Cleanup deletes the class and the Node.
func startStatusWriter(t *testing.T) *statusWriter {
	t.Helper()
	s, ctx := suite.s, context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: writerNode, Labels: map[string]string{nodeLabelKey: writerNode}}}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	class := newClass(wrappers.Resources("100m", "64Mi"))
	class.Name = writerClass
	class.Spec.Selector.MatchLabels = map[string]string{nodeLabelKey: writerNode}
	if err := k8s.Create(ctx, class); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	nodeCfg, err := s.CP.AddUser("system:node:"+writerNode, "system:nodes", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	leaseCfg, err := s.CP.AddUser("system:serviceaccount:"+v1alpha1.DefaultLeaseNamespace+":"+v1alpha1.LeaseServiceAccountPrefix+writerNode,
		"system:serviceaccounts", "system:serviceaccounts:"+v1alpha1.DefaultLeaseNamespace, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	nodeCfg.QPS, leaseCfg.QPS = -1, -1
	w := &statusWriter{t: t, stop: make(chan struct{}), notReadyAs: map[string]int{}}
	if w.node, err = client.New(nodeCfg, client.Options{Scheme: k8s.Scheme()}); err != nil {
		t.Fatal(err)
	}
	if w.kube, err = kubernetes.NewForConfig(leaseCfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.halt()
		_ = k8s.Delete(context.Background(), &v1alpha1.SandboxPoolClass{ObjectMeta: metav1.ObjectMeta{Name: writerClass}})
		eventually(t, "the writer's pool gone", time.Minute, func() (bool, string) {
			var p v1alpha1.SandboxPool
			err := k8s.Get(context.Background(), types.NamespacedName{Name: writerPool}, &p)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		_ = kube.CoreV1().Nodes().Delete(context.Background(), writerNode, metav1.DeleteOptions{})
		_ = kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Delete(context.Background(), writerPool, metav1.DeleteOptions{})
	})
	eventually(t, "the writer's pool created", time.Minute, func() (bool, string) {
		var p v1alpha1.SandboxPool
		err := k8s.Get(ctx, types.NamespacedName{Name: writerPool}, &p)
		return err == nil, fmt.Sprint(err)
	})
	// Written until the pool is Ready before the counting starts.
	eventually(t, "the writer's pool Ready", time.Minute, func() (bool, string) {
		w.renewLease(ctx)
		if err := w.write(ctx, 0); err != nil {
			return false, err.Error()
		}
		var p v1alpha1.SandboxPool
		if err := k8s.Get(ctx, types.NamespacedName{Name: writerPool}, &p); err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == v1alpha1.PhaseReady, describe(&p)
	})
	w.wg.Add(3)
	go w.writeLoop()
	go w.leaseLoop()
	go w.watch()
	return w
}

// write applies the agent's status of the writer's pool, with n in allocatedMemoryBytes.
func (w *statusWriter) write(ctx context.Context, n int64) error {
	now := metav1.Now()
	cond := func(typ v1alpha1.ConditionType) metav1.Condition {
		return metav1.Condition{Type: typ.String(), Status: metav1.ConditionTrue, Reason: "E2EWriter", Message: "written by the e2e status writer", LastTransitionTime: now}
	}
	st := v1alpha1.SandboxPoolStatus{
		Conditions: []metav1.Condition{
			cond(v1alpha1.ConditionPlaceholderPodReady), cond(v1alpha1.ConditionResourceSynced), cond(v1alpha1.ConditionNodeCtlHealthy),
		},
		NodeCtl:  &v1alpha1.NodeCtlStatus{Connected: ptr.To(true)},
		PoolInfo: &v1alpha1.PoolInfo{AllocatedMemoryBytes: ptr.To(n)},
	}
	patch, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.KindSandboxPool,
		"metadata": map[string]any{"name": writerPool}, "status": st,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return w.node.Status().Patch(ctx, &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: writerPool}},
		client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(writerFieldManager), client.ForceOwnership)
}

func (w *statusWriter) writeLoop() {
	defer w.wg.Done()
	tick := time.NewTicker(writeEvery)
	defer tick.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		at := time.Now()
		err := w.write(context.Background(), n)
		w.mu.Lock()
		w.attempts++
		if err != nil {
			w.errs = append(w.errs, fmt.Sprintf("%s write %d: %v", at.Format("15:04:05.000"), n, err))
		} else {
			w.written = n
		}
		w.mu.Unlock()
	}
}

// renewLease renews (or creates) the writer pool's Lease, as its agent does.
func (w *statusWriter) renewLease(ctx context.Context) {
	leases := w.kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, writerPool, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, _ = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: writerPool, Namespace: v1alpha1.DefaultLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(writerNode), AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		return
	}
	if err == nil {
		l.Spec.RenewTime = &now
		_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
}

func (w *statusWriter) leaseLoop() {
	defer w.wg.Done()
	tick := time.NewTicker(suiteTimers().LeaseRenewInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			w.renewLease(context.Background())
		}
	}
}

// watch follows the writer's pool: the number it carries must never go back (a write that
// was lost), and its phase must stay Ready.
func (w *statusWriter) watch() {
	defer w.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-w.stop; cancel() }()
	wc, err := client.NewWithWatch(suite.s.Admin, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		w.mu.Lock()
		w.regressed = append(w.regressed, "no watch: "+err.Error())
		w.mu.Unlock()
		return
	}
	for ctx.Err() == nil {
		wi, err := wc.Watch(ctx, &v1alpha1.SandboxPoolList{}, client.MatchingFields{"metadata.name": writerPool})
		if err != nil {
			time.Sleep(pollInterval) // a failed watch request (API server restarting): try again
			continue
		}
		for ev := range wi.ResultChan() {
			if p, ok := ev.Object.(*v1alpha1.SandboxPool); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				w.observe(p)
			}
		}
		wi.Stop()
	}
}

func (w *statusWriter) observe(p *v1alpha1.SandboxPool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.Status.PoolInfo != nil && p.Status.PoolInfo.AllocatedMemoryBytes != nil {
		n := *p.Status.PoolInfo.AllocatedMemoryBytes
		if n < w.seen {
			w.regressed = append(w.regressed, fmt.Sprintf("%s: %d after %d", time.Now().Format("15:04:05.000"), n, w.seen))
		}
		w.seen = max(w.seen, n)
	}
	if p.Status.Phase != v1alpha1.PhaseReady {
		w.notReady++
		w.notReadyAs[describe(p)]++
	}
}

// lastWritten is the number of the last successful write.
func (w *statusWriter) lastWritten() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// halt stops the writer (once) and waits for its loops.
func (w *statusWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// writerResult is what the writer saw.
type writerResult struct {
	attempts, failed int
	errs             []string
	lastWritten      int64
	final            int64 // the number the pool holds at the end
	regressed        []string
	notReady         int
	notReadyAs       map[string]int
}

func (r writerResult) String() string {
	return fmt.Sprintf("%d status writes every %s, %d failed; last written %d, the pool holds %d; %d regressions; %d updates of the pool not Ready",
		r.attempts, writeEvery, r.failed, r.lastWritten, r.final, len(r.regressed), r.notReady)
}

// result halts the writer and reads the pool's final number.
func (w *statusWriter) result() writerResult {
	w.halt()
	var p v1alpha1.SandboxPool
	final := int64(-1)
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: writerPool}, &p); err == nil &&
		p.Status.PoolInfo != nil && p.Status.PoolInfo.AllocatedMemoryBytes != nil {
		final = *p.Status.PoolInfo.AllocatedMemoryBytes
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return writerResult{
		attempts: w.attempts, failed: len(w.errs), errs: append([]string(nil), w.errs...), lastWritten: w.written, final: final,
		regressed: append([]string(nil), w.regressed...), notReady: w.notReady, notReadyAs: w.notReadyAs,
	}
}

// check fails t unless every write succeeded, none was lost and the pool stayed Ready.
func (r writerResult) check(t testing.TB, during string) {
	t.Helper()
	t.Logf("%s: %s", during, r)
	if r.failed > 0 {
		t.Errorf("%s: %d of %d status writes of node %s failed, e.g.:\n%s", during, r.failed, r.attempts, writerNode, strings.Join(r.errs[:min(len(r.errs), 5)], "\n"))
	}
	if r.final != r.lastWritten {
		t.Errorf("%s: the pool holds write %d, the last one written was %d: a write was lost", during, r.final, r.lastWritten)
	}
	if len(r.regressed) > 0 {
		t.Errorf("%s: the pool's status went back (an older write over a newer): %v", during, r.regressed)
	}
	if r.notReady > 0 {
		t.Errorf("%s: the writer's pool left Ready %d times: %v", during, r.notReady, r.notReadyAs)
	}
}

// admissionErrors are the writes of classes and pools whose admission failed in [from, to)
// (the API server's audit log): a webhook that could not be called, or another 5xx, by
// user. A request its own client gave up on (a 504 "context canceled": a controller
// replica stopping mid-request) failed nothing on the API server's side; those are counted
// apart, in cancelled.
func admissionErrors(t testing.TB, from, to time.Time) (n int, by map[string][]string, cancelled int) {
	t.Helper()
	events, err := framework.AuditEvents(suite.s.AuditLog(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	by = map[string][]string{}
	for _, e := range events {
		msg := e.ResponseStatus.Message
		switch {
		case strings.Contains(msg, "failed calling webhook"):
		case e.ResponseStatus.Code == 504 && strings.Contains(msg, "context canceled"):
			cancelled++
			continue
		case e.ResponseStatus.Code < 500:
			continue
		}
		n++
		by[e.User.Username] = append(by[e.User.Username], fmt.Sprintf("%s %s/%s %d %s", e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ResponseStatus.Code, msg))
	}
	return n, by, cancelled
}

// nodeWrites counts the writes of pool status by node identities in [from, to).
func nodeWrites(t testing.TB, from, to time.Time) int {
	t.Helper()
	events, err := framework.AuditEvents(suite.s.AuditLog(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e.User.Username, "system:node:") && e.ObjectRef.Subresource == "status" {
			n++
		}
	}
	return n
}
