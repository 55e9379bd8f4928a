package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
)

// TestAgentLeaseCredentials runs hack/agent-lease-credentials.sh as an operator would, for
// a node that has registered, and uses what it wrote: a real service account token
// (TokenRequest) bound to the Node, that renews the node's Leases in the Lease namespace
// through deploy/rbac's RoleBinding and the node policy, and is refused Leases anywhere
// else.
func TestAgentLeaseCredentials(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Config)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lease-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, "lease-node", metav1.DeleteOptions{}) })
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(cp.Root, "hack", "agent-lease-credentials.sh"), "lease-node", dir)
	cmd.Env = append(append(os.Environ(), cp.KubectlEnv()...), "DURATION=1h")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/agent-lease-credentials.sh: %v:\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + "lease-node"
	if got := review.Status.UserInfo.Username; got != want {
		t.Errorf("the kubeconfig authenticates as %q, want %q", got, want)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != "lease-node" {
		t.Errorf("the token carries the node claim %v, want [lease-node] (bound to the Node)", got)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-lease-node"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lease-node")}}
	var created *coordinationv1.Lease
	// The node policy reaches the API server's admission a moment after it is applied.
	support.Eventually(t, "the pool's Lease created with the written credentials", 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		created, err = kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
	})
	if created == nil {
		if created, err = kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Get(ctx, lease.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Errorf("renewing it: %v", err)
	}
	for _, ns := range []string{v1alpha1.DefaultSystemNamespace, "kube-node-lease"} {
		if _, err := kube.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("creating a Lease in %s: %v, want Forbidden", ns, err)
		}
	}
}

// TestNodePolicyCheckCommands runs the check docs/operator-guide.md gives for the node
// policy ("The node policy"): a server-side dry run of another node's pool Lease as a
// node's Lease identity is refused by the policy, the node's own is accepted.
func TestNodePolicyCheckCommands(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		t.Fatal(err)
	}
	lease := func(name string) string {
		return "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: " + name +
			", namespace: " + v1alpha1.DefaultLeaseNamespace + "}\nspec: {holderIdentity: node-a}\n"
	}
	for i, as := range [][]string{
		{"--as", "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + "node-a"},
		{"--as", "system:node:node-a", "--as-group", "system:nodes"},
	} {
		args := append([]string{"create", "--dry-run=server", "-f", "-"}, as...)
		refused := func() (bool, string) {
			_, stderr, err := cp.Kubectl(ctx, strings.NewReader(lease("placeholder-node-b")), args...)
			return err != nil && strings.Contains(stderr, "ValidatingAdmissionPolicy 'sandbox-pool-node-lease'") &&
				strings.Contains(stderr, "node node-a may write only the Lease of its own pool"), fmt.Sprint(err, stderr)
		}
		if i == 0 {
			// A policy applied a moment ago reaches the API server's admission a moment later.
			support.Eventually(t, "the node policy refuses node-b's pool Lease to node-a", 30*time.Second, 100*time.Millisecond, refused)
		} else if ok, answer := refused(); !ok {
			t.Errorf("kubectl %v for node-b's pool Lease: %s; want the policy's refusal", args, answer)
		}
		out, stderr, err := cp.Kubectl(ctx, strings.NewReader(lease("placeholder-node-a")), args...)
		if err != nil || !strings.Contains(out, "created (server dry run)") {
			t.Errorf("kubectl %v for node-a's own pool Lease: %v, %s %s; want it accepted", args, err, out, stderr)
		}
	}
}

// TestPodAndEventCheckCommands runs the checks docs/operator-guide.md gives for the pod policy
// and the event reporters ("How to verify on a live cluster"): as cluster admin, a server-side
// dry run of a pod that carries a pool's label, and of an event in the controller's name,
// are refused by the named policies.
func TestPodAndEventCheckCommands(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "placeholder-pod-policy.yaml"); err != nil {
		t.Fatal(err)
	}
	// No controller-manager makes the namespace's default service account here.
	admin := kubernetes.NewForConfigOrDie(cp.Config)
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const event = `apiVersion: events.k8s.io/v1
kind: Event
metadata: {generateName: probe-, namespace: default}
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: sandboxpool-controller
reportingInstance: sandboxpool-controller-probe
action: Probe
reason: Probe
type: Normal
regarding: {apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1, kind: SandboxPool, name: placeholder-node-a}
`
	for _, c := range []struct {
		what, policy, says string
		stdin              string
		args               []string
	}{
		{"a tenant's pod that looks like a piece of node-a's lock", "sandbox-pool-placeholder-pods", "metadata.labels[sandbox-pool.io/pool-name]: are kept for the placeholder pods", "",
			[]string{"-n", "default", "run", "fake-piece", "--image=pause", "--dry-run=server",
				"--labels=sandbox-pool.io/pool-name=placeholder-node-a", `--overrides={"spec":{"nodeName":"node-a"}}`}},
		{"an event in the controller's name", "sandbox-pool-event-reporters", "only the SandboxPool controller", event,
			[]string{"create", "--dry-run=server", "-f", "-"}},
	} {
		// A policy applied a moment ago reaches the API server's admission a moment later.
		support.Eventually(t, c.what+" refused", 30*time.Second, 100*time.Millisecond, func() (bool, string) {
			_, stderr, err := cp.Kubectl(ctx, strings.NewReader(c.stdin), c.args...)
			return err != nil && strings.Contains(stderr, "ValidatingAdmissionPolicy '"+c.policy+"'") && strings.Contains(stderr, c.says), fmt.Sprint(err, stderr)
		})
	}
}
