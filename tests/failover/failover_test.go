// Package failover runs two replicas of the real sandboxpool-controller binary against a real
// API server, as the controller's service account with the RBAC of deploy/rbac, and kills
// the leader.
package failover

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

const controllerUser = "system:serviceaccount:sandbox-pool-system:sandbox-pool-controller"

var (
	suite      framework.Suite
	admin      client.Client
	binary     string
	kubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp))
}

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	s, err := operator.Scheme()
	if err != nil {
		return err
	}
	if admin, err = client.New(cp.Config, client.Options{Scheme: s}); err != nil {
		return err
	}
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sandboxpool-failover-")
	if err != nil {
		return err
	}
	if binary, err = support.BuildBinary(cp.Root, dir, "./cmd/sandboxpool-controller"); err != nil {
		return err
	}
	kubeconfig, err = cp.KubeconfigFor(dir, controllerUser, "system:serviceaccounts",
		"system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	return err
}

type replica struct {
	*support.Proc
	probe, metrics string
}

func startReplica(t *testing.T, name string) replica {
	r := replica{probe: support.FreeAddr(t), metrics: support.FreeAddr(t)}
	r.Proc = support.StartProcess(t, name, binary, "--kubeconfig", kubeconfig,
		"--leader-elect", "--leader-lease-duration=4s", "--leader-renew-deadline=3s", "--leader-retry-period=500ms",
		"--health-probe-bind-address", r.probe, "--metrics-bind-address", r.metrics, "--zap-devel")
	return r
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	support.Eventually(t, what, within, 50*time.Millisecond, cond)
}

func leaderIdentity(t *testing.T) string {
	var l coordinationv1.Lease
	err := admin.Get(context.Background(), types.NamespacedName{Namespace: v1alpha1.DefaultSystemNamespace, Name: operator.DefaultLeaderElectionID}, &l)
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func createNodes(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ha-%02d", i), Labels: map[string]string{"pool": "ha"}}}
		if err := admin.Create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

// poolNodes lists the nodes that have a pool, sorted, failing on a pool that is not one per
// node of the class.
func poolNodes(t *testing.T) []string {
	var pools v1alpha1.SandboxPoolList
	if err := admin.List(context.Background(), &pools); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, p := range pools.Items {
		if p.Name != naming.PoolName(p.Spec.NodeName) || p.Spec.ClassRef.Name != "ha" {
			t.Fatalf("unexpected pool %s (node %s, class %s)", p.Name, p.Spec.NodeName, p.Spec.ClassRef.Name)
		}
		nodes = append(nodes, p.Spec.NodeName)
	}
	slices.Sort(nodes)
	return nodes
}

func wantNodes(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("ha-%02d", i))
	}
	return out
}

// TestLeaderFailover: two replicas, one leads and fans a class out; the leader is killed
// (SIGKILL: no graceful release); the other takes over and keeps fanning out, with every
// node having exactly one pool. Both replicas serve /healthz, /readyz and /metrics.
func TestLeaderFailover(t *testing.T) {
	suite.Require(t)
	ctx := context.Background()

	a := startReplica(t, "replica-a")
	eventually(t, "replica a leads", 30*time.Second, func() (bool, string) {
		return leaderIdentity(t) != "", "no holder"
	})
	first := leaderIdentity(t)
	b := startReplica(t, "replica-b")
	for _, r := range []replica{a, b} {
		eventually(t, r.Name+" healthy and ready", 30*time.Second, func() (bool, string) {
			h, hb := support.HTTPGet("http://" + r.probe + "/healthz")
			rd, rb := support.HTTPGet("http://" + r.probe + "/readyz")
			return h == http.StatusOK && rd == http.StatusOK, fmt.Sprintf("healthz %d %s, readyz %d %s", h, hb, rd, rb)
		})
	}

	createNodes(t, 0, 10)
	class := wrappers.MakeClass("ha").Selector("pool", "ha").Resources("1", "1Gi").Obj()
	if err := admin.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the leader creates 10 pools", 30*time.Second, func() (bool, string) {
		got := poolNodes(t)
		return slices.Equal(got, wantNodes(10)), fmt.Sprint(got)
	})
	// Only the leader reconciles: exactly one replica reports the class's pools, once the
	// leader has counted them (its metrics follow the pools it created).
	var ma, mb string
	eventually(t, "a replica reports the class's pools", 10*time.Second, func() (bool, string) {
		_, ma = support.HTTPGet("http://" + a.metrics + "/metrics")
		_, mb = support.HTTPGet("http://" + b.metrics + "/metrics")
		return strings.Contains(ma, `sandboxpool_pools{class="ha"`) || strings.Contains(mb, `sandboxpool_pools{class="ha"`), "neither"
	})
	if strings.Contains(ma, `sandboxpool_pools{class="ha"`) == strings.Contains(mb, `sandboxpool_pools{class="ha"`) {
		t.Fatalf("want exactly one replica (the leader) with class metrics; a has them: %v, b has them: %v",
			strings.Contains(ma, `class="ha"`), strings.Contains(mb, `class="ha"`))
	}

	leader, follower := a, b
	if strings.Contains(mb, `class="ha"`) {
		leader, follower = b, a
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	createNodes(t, 10, 20)
	eventually(t, follower.Name+" takes over", 30*time.Second, func() (bool, string) {
		id := leaderIdentity(t)
		return id != "" && id != first, id
	})
	t.Logf("leadership moved %s after SIGKILL (lease duration 4 s)", time.Since(killed).Round(time.Millisecond))
	eventually(t, "the new leader creates the other 10 pools", 30*time.Second, func() (bool, string) {
		got := poolNodes(t)
		return slices.Equal(got, wantNodes(20)), fmt.Sprint(got)
	})
	eventually(t, "the class counts 20 pools", 10*time.Second, func() (bool, string) {
		_ = admin.Get(ctx, types.NamespacedName{Name: "ha"}, class)
		return ptr.Deref(class.Status.TotalSandboxPools, 0) == 20, fmt.Sprintf("%+v", class.Status)
	})
	eventually(t, "the new leader's metrics count 20 pools of class ha", 10*time.Second, func() (bool, string) {
		_, m := support.HTTPGet("http://" + follower.metrics + "/metrics")
		lines := grep(m, `sandboxpool_pools{class="ha"`)
		total := 0.0
		for l := range strings.SplitSeq(lines, "\n") {
			var v float64
			if _, err := fmt.Sscanf(l[strings.LastIndex(l, " ")+1:], "%g", &v); err == nil {
				total += v
			}
		}
		return total == 20, lines
	})
}

func grep(s, substr string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
