package admission

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// Identities, as deploy/rbac binds them.
const controllerUser = "system:serviceaccount:sandbox-pool-system:sandbox-pool-controller"

var poolsGVR = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools}

// client returns a dynamic client authenticated as user in groups.
func client(t testing.TB, user string, groups ...string) dynamic.Interface {
	t.Helper()
	cfg, err := requireCluster(t).AddUser(user, append(groups, "system:authenticated")...)
	if err != nil {
		t.Fatal(err)
	}
	// No client-side throttling (client-go's default is 5 QPS): the latency benchmark
	// measures the server.
	cfg.QPS, cfg.Burst = -1, 0
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func admin(t testing.TB) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(requireCluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nodeClient(t testing.TB, node string) dynamic.Interface {
	return client(t, "system:node:"+node, "system:nodes")
}

func controllerClient(t testing.TB) dynamic.Interface {
	return client(t, controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system")
}

func poolName(node string) string { return "placeholder-" + node }

// createPool creates the pool of node for class as cluster admin.
func createPool(t testing.TB, node, class string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	y := `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPool
metadata: {name: ` + poolName(node) + `}
spec:
  classRef: {name: ` + class + `}
  nodeName: ` + node + `
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
`
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin(t).Resource(poolsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s: %v", u.GetName(), err)
	}
	t.Cleanup(func() { _ = admin(t).Resource(poolsGVR).Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
}

func applyStatus(c dynamic.Interface, pool, manager string, status map[string]any, force bool) error {
	_, err := c.Resource(poolsGVR).ApplyStatus(context.Background(), pool, framework.PoolStatus(pool, status),
		metav1.ApplyOptions{FieldManager: manager, Force: force})
	return err
}

func mergeStatus(c dynamic.Interface, pool, patch string) error {
	_, err := c.Resource(poolsGVR).Patch(context.Background(), pool, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

func cond(typ, status string) map[string]any { return framework.Condition(typ, status, "Test") }

func agentStatus() map[string]any {
	return map[string]any{
		"poolInfo":   map[string]any{"zone": "zone-a", "allocatableMemoryBytes": int64(4294967296)},
		"conditions": []any{cond(v1alpha1.ConditionPlaceholderPodReady.String(), "True")},
	}
}

// wantForbidden checks err is a Forbidden admission denial that says every fragment.
func wantForbidden(t *testing.T, what string, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want Forbidden", what)
		return
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want Forbidden, got %v", what, err)
		return
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%s: reason does not say %q: %v", what, f, err)
		}
	}
}

func TestNodeWritesOnlyItsOwnPoolStatus(t *testing.T) {
	requireCluster(t)
	createPool(t, "node-a", "c1")
	createPool(t, "node-b", "c1")
	nodeA := nodeClient(t, "node-a")

	if err := applyStatus(nodeA, poolName("node-a"), v1alpha1.FieldManagerAgent, agentStatus(), false); err != nil {
		t.Fatalf("node-a applying its own pool's status: %v", err)
	}
	err := applyStatus(nodeA, poolName("node-b"), v1alpha1.FieldManagerAgent, agentStatus(), false)
	wantForbidden(t, "node-a writing node-b's pool", err, "system:node:node-a", "placeholder-node-b")

	got, err := admin(t).Resource(poolsGVR).Get(context.Background(), poolName("node-b"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found := got.Object["status"]; found {
		t.Errorf("node-b's status changed: %v", got.Object["status"])
	}
}

func TestNodeCannotWriteControllerFields(t *testing.T) {
	requireCluster(t)
	createPool(t, "node-c", "c1")
	nodeC := nodeClient(t, "node-c")
	withPhase := agentStatus()
	withPhase["phase"] = string(v1alpha1.PhaseReady)
	wantForbidden(t, "node writing phase",
		applyStatus(nodeC, poolName("node-c"), v1alpha1.FieldManagerAgent, withPhase, false), "status.phase")

	withCond := agentStatus()
	withCond["conditions"] = append(withCond["conditions"].([]any), cond(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True"))
	wantForbidden(t, "node writing PlaceholderAgentHealthy",
		applyStatus(nodeC, poolName("node-c"), v1alpha1.FieldManagerAgent, withCond, false), v1alpha1.ConditionPlaceholderAgentHealthy.String())
}

func TestControllerWritesOnlyItsFields(t *testing.T) {
	requireCluster(t)
	createPool(t, "node-d", "c1")
	if err := applyStatus(nodeClient(t, "node-d"), poolName("node-d"), v1alpha1.FieldManagerAgent, agentStatus(), false); err != nil {
		t.Fatal(err)
	}
	ctrl := controllerClient(t)
	mine := map[string]any{
		"phase":      string(v1alpha1.PhaseReady),
		"conditions": []any{cond(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True"), cond(v1alpha1.ConditionNodeNotFound.String(), "False")},
	}
	if err := applyStatus(ctrl, poolName("node-d"), v1alpha1.FieldManagerController, mine, false); err != nil {
		t.Fatalf("controller applying phase and its conditions: %v", err)
	}
	// Even a forced apply or a plain patch cannot rewrite the agent's fields.
	wantForbidden(t, "controller rewriting poolInfo",
		mergeStatus(ctrl, poolName("node-d"), `{"status":{"poolInfo":{"zone":"forged"}}}`), "status.poolInfo")
	wantForbidden(t, "controller rewriting placeholderPod",
		mergeStatus(ctrl, poolName("node-d"), `{"status":{"placeholderPod":{"name":"forged"}}}`), "status.placeholderPod")
	forced := map[string]any{"conditions": []any{cond(v1alpha1.ConditionPlaceholderPodReady.String(), "False")}}
	wantForbidden(t, "controller forcing the agent's condition",
		applyStatus(ctrl, poolName("node-d"), v1alpha1.FieldManagerController, forced, true), v1alpha1.ConditionPlaceholderPodReady.String())
}

func TestOthersCannotWriteStatus(t *testing.T) {
	requireCluster(t)
	createPool(t, "node-e", "c1")
	// All are in system:nodes, so deploy/rbac gives them the agent role: only the webhook
	// stands between them and node-e's status. A service account named after node-e is not
	// node-e: a node writes status as system:node:<node> only.
	for _, who := range []struct {
		name   string
		groups []string
	}{
		{"alice", []string{"system:nodes"}},
		{"system:serviceaccount:sandbox-pool-system:placeholder-agent-node-e", []string{"system:serviceaccounts", "system:nodes"}},
		{"system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + "node-e", []string{"system:serviceaccounts", "system:nodes"}},
		{"system:node:node-f", []string{"system:nodes"}},
	} {
		err := applyStatus(client(t, who.name, who.groups...), poolName("node-e"), v1alpha1.FieldManagerAgent, agentStatus(), false)
		wantForbidden(t, who.name, err, who.name, poolName("node-e"))
	}
	if err := applyStatus(nodeClient(t, "node-e"), poolName("node-e"), v1alpha1.FieldManagerAgent, agentStatus(), false); err != nil {
		t.Errorf("node-e writing its pool: %v", err)
	}
}
