package scale

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/tests/support"
)

// probeRate is the webhook probe's request rate: low enough not to add load of its own.
const probeRate = 10

// webhookUnderLoad starts the admission webhook, registers deploy/webhook's
// ValidatingWebhookConfiguration, and takes the round trip of a pool status merge patch by
// the node's own identity at probeRate per second for half of window; then removes the
// configuration and takes the same for the other half as the baseline. The hollow nodes'
// Lease load keeps running. The configuration is removed before returning (the hollow
// agents write as cluster admin, which the status-scoping rule would refuse).
func webhookUnderLoad(t *testing.T, ctx context.Context, e *env, node string, window time.Duration) *webhookResult {
	wo := envtest.WebhookInstallOptions{Paths: []string{filepath.Join(e.cp.Root, "deploy", "webhook")}}
	if err := wo.PrepWithoutInstalling(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wo.Cleanup() })
	bin, err := support.BuildBinary(e.cp.Root, e.dir, "./cmd/sandboxpool-webhook")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := e.cp.KubeconfigFor(e.dir, "bench-webhook", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	health := support.FreeAddr(t)
	proc := support.StartProcess(t, "webhook", bin, "--kubeconfig", kc,
		"--addr", net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)), "--cert-dir", wo.LocalServingCertDir,
		"--metrics-addr", support.FreeAddr(t), "--health-addr", health, "--controller-usernames", controllerUser)
	defer func() { _ = proc.Stop(15 * time.Second) }()
	support.Eventually(t, "webhook ready", 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		code, body := support.HTTPGet("http://" + health + "/readyz")
		return code == http.StatusOK, body
	})
	if err := wo.Install(e.cp.Config); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.cp.AddUser("system:node:"+node, "system:nodes", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1 // a real node's client is not the bottleneck of one request per 100 ms
	nodeClient, err := client.New(cfg, client.Options{Scheme: e.scheme})
	if err != nil {
		t.Fatal(err)
	}
	pool := naming.PoolName(node)
	probe := func(k int) []time.Duration {
		var out []time.Duration
		tick := time.NewTicker(time.Second / probeRate)
		defer tick.Stop()
		for i := range k {
			<-tick.C
			patch := fmt.Sprintf(`{"status":{"poolInfo":{"zone":"hollow","allocatedMemoryBytes":%d}}}`, i+1)
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(poolGVK)
			obj.SetName(pool)
			began := time.Now()
			if err := nodeClient.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatalf("status patch by %s: %v", node, err)
			}
			out = append(out, time.Since(began))
		}
		return out
	}
	k := int(window.Seconds()/2) * probeRate
	with := probe(k)
	for _, c := range wo.ValidatingWebhooks {
		_ = e.admin.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: c.Name}})
	}
	support.Eventually(t, "webhook configuration removed", time.Minute, 100*time.Millisecond, func() (bool, string) {
		var l admissionregistrationv1.ValidatingWebhookConfigurationList
		err := e.admin.List(ctx, &l)
		return err == nil && len(l.Items) == 0, fmt.Sprint(err)
	})
	without := probe(k)
	r := &webhookResult{Requests: k, P50: pct(with, 50), P99: pct(with, 99), Max: pct(with, 100),
		BaseP50: pct(without, 50), BaseP99: pct(without, 99)}
	t.Logf("FIGURE webhook under the steady load: pool status patch by its node, %d/s: with the webhook p50=%s p99=%s max=%s; without p50=%s p99=%s (%d requests each)",
		probeRate, r.P50, r.P99, r.Max, r.BaseP50, r.BaseP99, k)
	return r
}
