package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestAgentIdentityScopedByTheWebhook: RBAC gives every node identity the agent role
// (pools/status patch, cluster-wide); the real webhook, registered on the API server from
// deploy/webhook, lets a node write only its own pool's status and only the agent's fields.
func TestAgentIdentityScopedByTheWebhook(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	ctx := context.Background()
	before := getPool(t)
	patchStatus := func(node, patch string) error {
		cfg, err := s.CP.AddUser("system:node:"+node, "system:nodes", "system:authenticated")
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c.Status().Patch(ctx, &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("e2e-forger"))
	}

	// Another node's identity: denied by the webhook, whatever it writes.
	err := patchStatus("intruder", `{"status":{"nodeCtl":{"connected":false}}}`)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "validate.sandboxpool.agentcube.volcano.sh") {
		t.Fatalf("another node writing %s's pool status: %v; want Forbidden by the webhook", nodeName, err)
	}
	t.Logf("another node's identity: %v", err)

	// The node's own identity may not change the controller's fields.
	err = patchStatus(nodeName, `{"status":{"phase":"Pending"}}`)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "phase") {
		t.Fatalf("the node changing status.phase: %v; want Forbidden naming the field", err)
	}
	t.Logf("the node's own identity changing phase: %v", err)

	// Nothing of it reached the pool.
	after := getPool(t)
	if after.ResourceVersion != before.ResourceVersion && (after.Status.Phase != before.Status.Phase ||
		!ptr.Deref(after.Status.NodeCtl.Connected, false)) {
		t.Errorf("the pool's status changed: %s", describe(after))
	}
}
