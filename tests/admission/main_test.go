// Package admission tests the admission webhook as the API server calls it: the
// ValidatingWebhookConfiguration from deploy/webhook registered on a real kube-apiserver,
// the webhook server running in this process, the RBAC of deploy/rbac applied, and real
// authenticated identities (client certificates) for nodes, the controller and others.
package admission

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/webhook"
)

var (
	suite framework.Suite
	cp    *framework.ControlPlane
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp, framework.WithWebhooks(filepath.Join("deploy", "webhook"))))
}

// setUp applies the RBAC of deploy/rbac and the RuntimeClass and starts the webhook where the API server
// expects it, then waits until it is ready (certificate loaded, inventory synced).
func setUp(ctx context.Context, c *framework.ControlPlane) error {
	cp = c
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac", "runtimeclass.yaml"); err != nil {
		return err
	}
	log := zap.New(zap.UseDevMode(false))
	ctrllog.SetLogger(log) // controller-runtime's certificate watcher logs to the global logger
	return cp.StartWebhook(ctx, webhook.Options{
		ControllerUsernames: []string{controllerUser},
		OperatorGroups:      []string{v1alpha1.OperatorGroup},
	}, log)
}

func requireCluster(t testing.TB) *framework.ControlPlane {
	t.Helper()
	return suite.Require(t)
}
