package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/tests/support"
)

func poolObject(t *testing.T, name, node, class, extra string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	y := `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPool
metadata: {name: "` + name + `"}
spec:
  classRef: {name: ` + class + `}
  nodeName: "` + node + `"
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi` + extra + `}}
`
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestLongNodeNameHashRule: the CRD's CEL rule cannot hash, so for node names over 241
// characters only the webhook enforces the deterministic name (its policy); it admits the
// hashed name.
func TestLongNodeNameHashRule(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	pools := admin(t).Resource(poolsGVR)
	node := strings.Repeat("n", 120) + "." + strings.Repeat("x", 129) // 250 characters
	sum := sha256.Sum256([]byte(node))
	good := "placeholder-" + node[:232] + "-" + hex.EncodeToString(sum[:])[:8]
	bad := "placeholder-" + node[:241]

	_, err := pools.Create(ctx, poolObject(t, bad, node, "c1", ""), metav1.CreateOptions{})
	wantForbidden(t, "truncated name", err, "metadata.name", "must be the pool name of spec.nodeName")
	if _, err := pools.Create(ctx, poolObject(t, good, node, "c1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("hashed name rejected: %v", err)
	}
	_ = pools.Delete(ctx, good, metav1.DeleteOptions{})
}

// TestSecondClassForOwnedNode: a pool of another class for a node that already has one is
// denied by the webhook (its inventory comes from an informer, so poll until it has seen
// the first pool; before that the API server answers AlreadyExists, as the name is
// deterministic — the atomic first layer of single-class-per-node).
func TestSecondClassForOwnedNode(t *testing.T) {
	requireCluster(t)
	createPool(t, "node-g", "c1")
	pools := admin(t).Resource(poolsGVR)
	var err error
	support.Eventually(t, "the webhook denies the second class", 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, err = pools.Create(context.Background(), poolObject(t, poolName("node-g"), "node-g", "c2", ""), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("want AlreadyExists or the webhook's denial, got %v", err)
		}
		return apierrors.IsForbidden(err), fmt.Sprintf("create: %v", err)
	})
	wantForbidden(t, "second class for node-g", err, "node-g", "c1")
}
