// Package admission tests the admission webhook as the API server calls it: the
// ValidatingWebhookConfiguration from deploy/webhook registered on a real kube-apiserver,
// the webhook server running in this process, the RBAC of deploy/rbac applied, and real
// authenticated identities (client certificates) for nodes, the controller and others.
package admission

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/webhook"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

var (
	suite      framework.Suite
	cp         *framework.ControlPlane
	healthAddr string
)

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, setUp, framework.WithWebhooks(filepath.Join("deploy", "webhook"))))
}

// setUp applies the RBAC of deploy/rbac and starts the webhook where the API server
// expects it, then waits until it is ready (certificate loaded, inventory synced).
func setUp(ctx context.Context, c *framework.ControlPlane) error {
	cp = c
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "rbac"); err != nil {
		return err
	}
	wo := cp.WebhookOptions()
	healthAddr = freeAddr()
	opts := webhook.Options{
		Addr:        net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)),
		CertDir:     wo.LocalServingCertDir,
		MetricsAddr: freeAddr(),
		HealthAddr:  healthAddr,

		ControllerUsernames: []string{controllerUser},
		OperatorGroups:      []string{v1alpha1.OperatorGroup},
	}
	errc := make(chan error, 1)
	go func() { errc <- webhook.Run(ctx, cp.Config, opts, zap.New(zap.UseDevMode(false))) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			return fmt.Errorf("webhook exited: %w", err)
		default:
		}
		if resp, err := http.Get("http://" + healthAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling interval, bounded by the deadline
	}
	return fmt.Errorf("webhook not ready within 30s")
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func requireCluster(t testing.TB) *framework.ControlPlane {
	t.Helper()
	return suite.Require(t)
}
