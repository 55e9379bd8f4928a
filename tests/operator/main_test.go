// Package operator tests the SandboxPool controller on a real API server, run as its own
// service-account identity with exactly the RBAC of deploy/rbac (not as admin). The
// placeholder pods' admission policy (deploy/placeholder-pod-policy.yaml) is not applied:
// it would refuse the stand-in mirror pods the tests create as admin, and the forged pods
// that show the controller's own check (tests/attack runs it).
package operator

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

const (
	controllerUser = "system:serviceaccount:sandbox-pool-system:sandbox-pool-controller"
	leaseNamespace = v1alpha1.DefaultLeaseNamespace
	// leaseTTL is shortened from the 40 s default so expiry is observed in seconds.
	leaseTTL = 5 * time.Second
	// finalizerTimeout is shortened from the 10 min default.
	finalizerTimeout = 15 * time.Second
	// nodeGoneGrace is shortened from the 2 min default.
	nodeGoneGrace = 10 * time.Second
)

var (
	suite  framework.Suite
	scheme = runtime.NewScheme()
	admin  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp, framework.WithAuditLog()))
}

func setUp(ctx context.Context, cp *framework.ControlPlane) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true)))
	var err error
	if admin, err = client.New(cp.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		return err
	}
	// No controller-manager runs here to create the namespace's default service account,
	// which the ServiceAccount admission plugin needs for the stand-in mirror pods.
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mirrorNamespace, Name: "default"}}); err != nil {
		return err
	}
	cfg, err := cp.AddUser(controllerUser, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
	if err != nil {
		return err
	}
	mgr, err := operator.NewManager(cfg, suiteOptions())
	if err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

// suiteOptions are the controller's defaults with the minute-scale timers shortened so
// their effects are observed in seconds, and no listeners or leader election.
func suiteOptions() operator.Options {
	o := operator.DefaultOptions()
	o.LeaseTTL = leaseTTL
	o.FinalizerTimeout = finalizerTimeout
	o.NodeGoneGrace = nodeGoneGrace
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.LeaderElection = false
	return o
}

func requireCluster(t testing.TB) {
	t.Helper()
	suite.Require(t)
}
