package attack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/agent/leasetoken"
	"github.com/agentcube/sandboxpool/schema/naming"
)

// TestLeaseCredentialChain follows a node's Lease identity from its first token on, with the
// commands and code the install uses: hack/agent-lease-credentials.sh run before the node has
// registered makes a token bound to nothing, which the node policy refuses every Lease write;
// the agent's Keeper (agent/leasetoken) exchanges it, once the Node exists, for a token bound
// to it, which renews the pool's Lease, and then for the next. (That the API server takes
// neither once the Node is deleted is TestAttacks' node-c.)
func TestLeaseCredentialChain(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	const node = "node-d"
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(cp.Root, "hack", "agent-lease-credentials.sh"), node, dir)
	cmd.Env = append(append(os.Environ(), cp.KubectlEnv()...), "DURATION=10m")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "bound to nothing") {
		t.Fatalf("hack/agent-lease-credentials.sh before the node registered: %v: %s; want a token bound to nothing", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, keeper, err := leasetoken.New(cfg, node, 10*time.Minute, clock.RealClock{})
	if err != nil || keeper == nil {
		t.Fatalf("keeping the token of the script's kubeconfig: %v (keeper %v)", err, keeper)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	leases := kube.CoordinationV1().Leases(leaseNS)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(node)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: ptr.To(metav1.NowMicro())}}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "must use a token bound to Node "+node) {
		t.Fatalf("the pool's Lease with the token bound to nothing: %v; want the node policy's refusal", err)
	}
	if due, _ := keeper.Due(time.Now()); !due {
		t.Error("a token bound to nothing is not due for an exchange")
	}
	if err := keeper.Refresh(ctx); err == nil {
		t.Error("exchanged for a token bound to a Node that does not exist")
	}

	nodes := ids[admin].kube.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(ctx, node, metav1.DeleteOptions{}) })
	if err := keeper.Refresh(ctx); err != nil {
		t.Fatalf("exchanging the token for one bound to Node %s: %v", node, err)
	}
	if due, in := keeper.Due(time.Now()); due || in < 7*time.Minute {
		t.Errorf("the new token is due (%v) in %s, want after 80 %% of 10 minutes", due, in)
	}
	written, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := keeper.Token(); string(written) != tok.AccessToken {
		t.Error("the token file does not hold the new token")
	}
	created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the pool's Lease with the token bound to its Node: %v", err)
	}
	if err := keeper.Refresh(ctx); err != nil {
		t.Fatalf("the next token: %v", err)
	}
	if _, err := leases.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renewing with the next token: %v", err)
	}
}
