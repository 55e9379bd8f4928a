// Package operator tests the SandboxPool controller on a real API server, run as its own
// service-account identity with exactly the RBAC of deploy/rbac (not as admin).
package operator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	controllerUser = "system:serviceaccount:sandbox-pool-system:sandbox-pool-controller"
	leaseNamespace = v1alpha1.DefaultLeaseNamespace
	// leaseTTL is shortened from the 40 s default so expiry is observed in seconds.
	leaseTTL = 5 * time.Second
)

var (
	suite  framework.Suite
	scheme = runtime.NewScheme()
	admin  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp))
}

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	var err error
	if admin, err = client.New(cp.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "-f", filepath.Join(cp.Root, "deploy", "rbac")); err != nil {
		return fmt.Errorf("applying deploy/rbac: %w: %s", err, stderr)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}); err != nil {
		return err
	}
	cfg, err := cp.AddUser(controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 zap.New(zap.UseDevMode(true)),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{leaseNamespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &operator.PoolReconciler{
		Client: mgr.GetClient(), Clock: clock.RealClock{}, LeaseNamespace: leaseNamespace,
		LeaseTTL: leaseTTL, NodeCtlUnreadyAfter: 5 * time.Minute,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

func requireCluster(t testing.TB) {
	t.Helper()
	suite.Require(t)
}
