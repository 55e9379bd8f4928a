package admission

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	admissionv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// admissionMode is what reviews a pool's status write: the webhook, the benchmark's
// ValidatingAdmissionPolicy (testdata/status-scoping-vap.yaml), or nothing.
type admissionMode string

const (
	modeWebhook admissionMode = "webhook"
	modeVAP     admissionMode = "vap"
	modeNone    admissionMode = "none"
)

// benchRounds is how many blocks of each mode throughAPIServer runs, in rotating order, so
// that a drift of the machine's load falls on every mode alike.
const benchRounds = 4

// BenchmarkStatusPatchThroughAPIServer measures what a node's status write pays for its
// admission: the same merge patch of its pool's status (one node-ctl figure), by the
// node's own identity, through the real API server, reviewed by the webhook, by the same
// status-scoping rule as a ValidatingAdmissionPolicy in CEL (a fixture of this benchmark,
// testdata/status-scoping-vap.yaml), or by nothing. The pool carries a full status written
// by both of its writers (server-side apply), so the API server sends the webhook what it
// sends in a cluster: both objects with their managedFields. Reports what
// throughAPIServer reports.
//
//	make tools && KUBEBUILDER_ASSETS=$(ls -d .tools/controlplane-*) \
//	  go test -run '^$' -bench ThroughAPIServer -benchtime 400x ./tests/admission/
func BenchmarkStatusPatchThroughAPIServer(b *testing.B) {
	requireCluster(b)
	createPool(b, "bench-node", "c1")
	node := nodeClient(b, "bench-node")
	other := nodeClient(b, "bench-other")
	pool := poolName("bench-node")
	controllerStatus := map[string]any{"phase": "Ready", "conditions": []any{
		cond(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True"), cond(v1alpha1.ConditionNodeNotFound.String(), "False")}}
	if err := applyStatus(controllerClient(b), pool, v1alpha1.FieldManagerController, controllerStatus, false); err != nil {
		b.Fatal(err)
	}
	if err := applyStatus(node, pool, v1alpha1.FieldManagerAgent, fullAgentStatus(), false); err != nil {
		b.Fatal(err)
	}
	throughAPIServer(b, "status-scoping-vap.yaml", func(i int) error {
		return mergeStatus(node, pool, fmt.Sprintf(`{"status":{"poolInfo":{"zone":"zone-a","allocatedMemoryBytes":%d}}}`, i))
	}, admissionProbe{
		// Another node's write to the pool: which layer refuses it tells the mode.
		write:       func() error { return mergeStatus(other, pool, `{"status":{"poolInfo":{"zone":"probe"}}}`) },
		webhookSays: "may only be written by node",
	})
}

// BenchmarkClassCreateThroughAPIServer measures what a cluster admin's class create pays
// for its admission: a new class (a valid one, with its placeholder pods' RuntimeClass)
// created through the real API server, reviewed by the webhook (the RuntimeClass check and
// field ownership), by a stand-in ValidatingAdmissionPolicy in CEL (a fixture of this
// benchmark, testdata/class-create-vap.yaml), or by nothing. The classes are deleted
// after the benchmark. Reports what throughAPIServer reports.
func BenchmarkClassCreateThroughAPIServer(b *testing.B) {
	requireCluster(b)
	ctx := context.Background()
	classes := admin(b).Resource(classesGVR)
	const label = "bench.sandboxpool.agentcube.io/class-create"
	b.Cleanup(func() {
		_ = classes.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label})
	})
	class := func(name, runtimeClass string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(`apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPoolClass
metadata: {name: `+name+`, labels: {`+label+`: "true"}}
spec:
  selector: {matchLabels: {sandbox.agentcube.io/pool: `+name+`}}
  resourcePolicy: {resources: {cpu: "4", memory: 8Gi}}
  placeholderPod: {runtimeClassName: `+runtimeClass+`, priorityClassName: system-node-critical}
`), &u.Object); err != nil {
			b.Fatal(err)
		}
		return u
	}
	throughAPIServer(b, "class-create-vap.yaml", func(i int) error {
		_, err := classes.Create(ctx, class(fmt.Sprintf("bench-%d", i), v1alpha1.DefaultRuntimeClassName), metav1.CreateOptions{})
		return err
	}, admissionProbe{
		// A class naming a RuntimeClass that does not exist, as a dry run.
		write: func() error {
			_, err := classes.Create(ctx, class("bench-probe", "no-such-runtimeclass"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		webhookSays: `RuntimeClass "no-such-runtimeclass" does not exist`,
	})
}

// throughAPIServer runs write (its argument a new number each time) b.N times in all,
// under each admission mode in rotating blocks: the webhook, the ValidatingAdmissionPolicy
// of testdata/vapFile, and nothing, so that a drift of the machine's load falls on every
// mode alike. Reports the p50 and p99 of each mode, what the webhook and the VAP add to the
// p50 and p99 of no admission, the CPU time per write of kube-apiserver and of this
// process (the client and the in-process webhook), and the mean time of the API server's
// call to the webhook, as its own metric has it (webhook-call-mean-µs).
func throughAPIServer(b *testing.B, vapFile string, write func(int) error, probe admissionProbe) {
	c := requireCluster(b)
	ctx := context.Background()
	timed := func(i int) time.Duration {
		start := time.Now()
		if err := write(i); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}

	kube := kubernetes.NewForConfigOrDie(c.Config)
	whs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	list, err := whs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		b.Fatalf("want the one webhook configuration, got %d (%v)", len(list.Items), err)
	}
	vap, binding := benchVAP(b, vapFile)
	policies := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := policies.Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	sw := admissionSwitch{webhooks: whs, webhookConfig: list.Items[0].DeepCopy(), bindings: bindings, binding: binding, probe: probe}
	// The suite's other tests expect the webhook alone.
	b.Cleanup(func() {
		sw.set(b, modeWebhook)
		_ = policies.Delete(ctx, vap.Name, metav1.DeleteOptions{})
	})

	apiserver, err := c.APIServerPID()
	if err != nil {
		b.Fatal(err)
	}
	type block struct {
		latencies      []time.Duration
		apiserver, own time.Duration
		// call is the time the API server's calls to the webhook took, by its own metric.
		call       time.Duration
		callsCount float64
	}
	results := map[admissionMode]*block{}
	modes := []admissionMode{modeWebhook, modeVAP, modeNone}
	perBlock := max(1, b.N/benchRounds)
	seq := 0
	b.ResetTimer()
	for round := range benchRounds {
		for j := range modes {
			m := modes[(round+j)%len(modes)]
			b.StopTimer()
			sw.set(b, m)
			for range 10 { // warm connections and caches after the switch
				seq++
				timed(seq)
			}
			b.StartTimer()
			r := results[m]
			if r == nil {
				r = &block{}
				results[m] = r
			}
			// The API server's metrics are read outside the CPU readings: serving and
			// parsing them costs both processes more than a block of writes.
			callsBefore, callsCountBefore := webhookCalls(b, kube)
			apiBefore, err := framework.ProcUsage(apiserver)
			if err != nil {
				b.Fatal(err)
			}
			ownBefore := ownCPU(b)
			for range perBlock {
				seq++
				r.latencies = append(r.latencies, timed(seq))
			}
			ownAfter := ownCPU(b)
			apiAfter, err := framework.ProcUsage(apiserver)
			if err != nil {
				b.Fatal(err)
			}
			callsAfter, callsCountAfter := webhookCalls(b, kube)
			r.call += callsAfter - callsBefore
			r.callsCount += callsCountAfter - callsCountBefore
			r.apiserver += apiAfter.CPU - apiBefore.CPU
			r.own += ownAfter - ownBefore
		}
	}
	b.StopTimer()

	q := func(m admissionMode, p float64) float64 {
		d := slices.Clone(results[m].latencies)
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)].Microseconds())
	}
	for _, m := range modes {
		r := results[m]
		n := float64(len(r.latencies))
		b.ReportMetric(q(m, 0.5), string(m)+"-p50-µs")
		b.ReportMetric(q(m, 0.99), string(m)+"-p99-µs")
		b.ReportMetric(float64(r.apiserver.Microseconds())/n, string(m)+"-apiserver-cpu-µs/op")
		b.ReportMetric(float64(r.own.Microseconds())/n, string(m)+"-process-cpu-µs/op")
	}
	if r := results[modeWebhook]; r.callsCount > 0 {
		b.ReportMetric(float64(r.call.Microseconds())/r.callsCount, "webhook-call-mean-µs")
	}
	for _, m := range []admissionMode{modeWebhook, modeVAP} {
		b.ReportMetric(q(m, 0.5)-q(modeNone, 0.5), string(m)+"-added-p50-µs")
		b.ReportMetric(q(m, 0.99)-q(modeNone, 0.99), string(m)+"-added-p99-µs")
	}
	b.ReportMetric(0, "ns/op") // per-write times are the metrics above
}

// fullAgentStatus is what a placeholder agent applies for a pool that runs: every field and
// condition it owns.
func fullAgentStatus() map[string]any {
	return map[string]any{
		"placeholderPod":        map[string]any{"name": "sandbox-pool-0-bench-node", "uid": "7c0f6d8e-3a1b-4f0e-9d6c-2b1a0e9f8d7c", "phase": "Running"},
		"placeholderAgent":      map[string]any{"version": "v0.1.0", "lastHeartbeat": "2026-11-29T10:00:00Z", "nodeCtlStarted": true, "nodeCtlStartAt": "2026-11-29T09:00:00Z"},
		"override":              map[string]any{"enabled": false, "source": "Class"},
		"nodeCtl":               map[string]any{"connected": true, "lastHeartbeat": "2026-11-29T09:58:00Z"},
		"poolInfo":              map[string]any{"zone": "zone-a", "allocatableMemoryBytes": int64(4294967296), "allocatedMemoryBytes": int64(0)},
		"lastAppliedGeneration": int64(1),
		"conditions": []any{
			cond(v1alpha1.ConditionPlaceholderPodReady.String(), "True"), cond(v1alpha1.ConditionResourceSynced.String(), "True"),
			cond(v1alpha1.ConditionNodeCtlHealthy.String(), "True"), cond(v1alpha1.ConditionResizeInProgress.String(), "False"),
			cond(v1alpha1.ConditionResizeDeferred.String(), "False"),
		},
	}
}

// benchVAP reads a benchmark's ValidatingAdmissionPolicy and its binding from testdata.
func benchVAP(b *testing.B, file string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		b.Fatal(err)
	}
	docs := bytes.Split(raw, []byte("\n---\n"))
	if len(docs) != 2 {
		b.Fatalf("testdata/%s: want a policy and a binding, got %d documents", file, len(docs))
	}
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict(docs[0], &vap); err != nil {
		b.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &binding); err != nil {
		b.Fatal(err)
	}
	return &vap, &binding
}

// admissionProbe is a write that the webhook refuses, saying webhookSays, the benchmark's
// VAP refuses ("bench VAP"), and nothing admits: which answer it gets tells which mode the
// API server applies.
type admissionProbe struct {
	write       func() error
	webhookSays string
}

// admissionSwitch registers what a mode needs and removes the rest.
type admissionSwitch struct {
	webhooks      admissionv1client.ValidatingWebhookConfigurationInterface
	webhookConfig *admissionregistrationv1.ValidatingWebhookConfiguration
	bindings      admissionv1client.ValidatingAdmissionPolicyBindingInterface
	binding       *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	probe         admissionProbe
}

// set switches to mode m and waits until the API server applies it.
func (s admissionSwitch) set(b *testing.B, m admissionMode) {
	b.Helper()
	ctx := context.Background()
	ensure := func(want bool, create func() error, del func() error) {
		var err error
		if want {
			if err = create(); apierrors.IsAlreadyExists(err) {
				err = nil
			}
		} else if err = del(); apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	ensure(m == modeWebhook, func() error {
		wh := s.webhookConfig.DeepCopy()
		wh.ResourceVersion, wh.UID = "", ""
		_, err := s.webhooks.Create(ctx, wh, metav1.CreateOptions{})
		return err
	}, func() error { return s.webhooks.Delete(ctx, s.webhookConfig.Name, metav1.DeleteOptions{}) })
	ensure(m == modeVAP, func() error {
		_, err := s.bindings.Create(ctx, s.binding.DeepCopy(), metav1.CreateOptions{})
		return err
	}, func() error { return s.bindings.Delete(ctx, s.binding.Name, metav1.DeleteOptions{}) })

	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err := s.probe.write()
		switch m {
		case modeWebhook:
			return err != nil && strings.Contains(err.Error(), s.probe.webhookSays), nil
		case modeVAP:
			return err != nil && strings.Contains(err.Error(), "bench VAP"), nil
		}
		return err == nil, nil
	})
	if err != nil {
		b.Fatalf("admission by %s not in effect within 30s", m)
	}
}

// webhookCalls reads the API server's own metric of its calls to the webhook
// (apiserver_admission_webhook_admission_duration_seconds of validate.sandboxpool...): the
// time they took in all, from the review's encoding to its answer's decoding, and how many.
func webhookCalls(b *testing.B, kube kubernetes.Interface) (time.Duration, float64) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var sum, count float64
	for line := range strings.SplitSeq(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.Contains(rest, `name="validate.sandboxpool.agentcube.volcano.sh"`) {
			continue
		}
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "apiserver_admission_webhook_admission_duration_seconds_sum":
			sum += v
		case "apiserver_admission_webhook_admission_duration_seconds_count":
			count += v
		}
	}
	return time.Duration(sum * float64(time.Second)), count
}

// ownCPU is this process's CPU time (user and system) so far.
func ownCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
