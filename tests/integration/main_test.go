// Package integration tests the API as the API server serves it: the CRDs generated from
// the CUE schema, installed with kubectl, on a real etcd + kube-apiserver.
package integration

import (
	"context"
	"os"
	"testing"

	"github.com/agentcube/sandboxpool/tests/framework"
)

var suite framework.Suite

// cp is the running control plane (nil when unavailable; tests call requireCluster first).
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, &suite, func(_ context.Context, c *framework.ControlPlane) error {
		cp = c
		return nil
	}))
}

func requireCluster(t *testing.T) *framework.ControlPlane {
	t.Helper()
	return suite.Require(t)
}
