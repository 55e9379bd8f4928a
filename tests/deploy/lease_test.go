package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// TestAgentLeaseCredentials runs hack/agent-lease-credentials.sh as an operator would and
// uses what it wrote: a real service account token (TokenRequest) that renews the node's
// Leases in the Lease namespace through deploy/rbac's RoleBinding and is refused Leases
// anywhere else.
func TestAgentLeaseCredentials(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		t.Fatal(err)
	}
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
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "placeholder-lease-node"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lease-node")}}
	created, err := kube.CoordinationV1().Leases(v1alpha1.DefaultLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the pool's Lease with the written credentials: %v", err)
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
