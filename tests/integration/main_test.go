// Package integration tests the API as the API server serves it: the CRDs generated from
// the CUE schema, installed with kubectl, on a real etcd + kube-apiserver.
package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/agentcube/sandboxpool/tests/framework"
)

var (
	cp       *framework.ControlPlane
	startErr error
)

func TestMain(m *testing.M) {
	if framework.Unavailable() == "" {
		cp, startErr = framework.Start()
	}
	code := m.Run()
	if cp != nil {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}

func requireCluster(t *testing.T) *framework.ControlPlane {
	t.Helper()
	framework.Require(t, cp, startErr)
	return cp
}
