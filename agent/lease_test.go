package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
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

// TestLeaseTakenWithOneRequest: a new pool's Lease costs one request, its create; a Lease
// an earlier run left is read and renewed in the node's name.
func TestLeaseTakenWithOneRequest(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			calls = append(calls, "create")
			return c.Create(ctx, o, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			calls = append(calls, "get")
			return c.Get(ctx, k, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			calls = append(calls, "update")
			return c.Update(ctx, o, opts...)
		},
	}).Build()
	o := DefaultOptions()
	o.NodeName = "n1"
	a := newAgent(nil, o, nil, nil)
	a.client = c
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	if _, err := a.getOrCreateLease(ctx, "placeholder-n1", now); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"create"}) {
		t.Errorf("a new Lease took %v, want one create", calls)
	}

	// Left by an earlier run, held by someone else: taken over in the node's name.
	calls = nil
	var l coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: o.LeaseNamespace, Name: "placeholder-n1"}, &l); err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("someone")
	if err := c.Update(ctx, &l); err != nil {
		t.Fatal(err)
	}
	calls = nil
	got, err := a.getOrCreateLease(ctx, "placeholder-n1", now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"create", "get", "update"}) || *got.Spec.HolderIdentity != "n1" {
		t.Errorf("an existing Lease took %v and is held by %q, want create, get, update and n1", calls, *got.Spec.HolderIdentity)
	}
}
