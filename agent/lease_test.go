package agent

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestLeaseErrorHint(t *testing.T) {
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	// The message NodeRestriction gives a node identity writing a Lease elsewhere.
	nodeRestriction := apierrors.NewForbidden(leases, "placeholder-n1",
		errors.New(`can only access leases in the "kube-node-lease" system namespace`))
	if h := leaseErrorHint(nodeRestriction); !strings.Contains(h, "--lease-kubeconfig") {
		t.Errorf("hint for the NodeRestriction refusal %q does not name --lease-kubeconfig", h)
	}
	for _, err := range []error{
		apierrors.NewForbidden(leases, "placeholder-n1", errors.New("RBAC: no rule")),
		apierrors.NewServiceUnavailable("down"),
		errors.New("dial tcp: connection refused"),
	} {
		if h := leaseErrorHint(err); h != "" {
			t.Errorf("hint for %v = %q, want none", err, h)
		}
	}
}
