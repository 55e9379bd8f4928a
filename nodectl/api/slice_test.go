package api

import (
	"strings"
	"testing"
)

func TestCheckSlicePath(t *testing.T) {
	for _, tc := range []struct {
		path        string
		warn, fails bool
	}{
		{path: DefaultCgroupPath},
		{path: "/kubepods/sandbox-pool"},
		{path: "/kubelet/kubepods/sandboxes"},        // a kubelet with --cgroup-root=/kubelet
		{path: "/kubepods.slice/sandbox-pool"},       // the systemd driver
		{path: "/sandbox-pool", warn: true},          // beside the pod root: counted twice
		{path: "/kubepods/burstable/sb", warn: true}, // below a QoS tier, not the root
		{path: "/kubepods/sandbox-pods", fails: true},
		{path: "/kubepods/pod-sandboxes", fails: true},
		{path: "/kubepods.slice/kubepods-sandbox_pod.slice", fails: true},
	} {
		warning, err := CheckSlicePath(tc.path)
		if (err != nil) != tc.fails {
			t.Errorf("CheckSlicePath(%q) error = %v, want an error: %v", tc.path, err, tc.fails)
		}
		if (warning != "") != tc.warn {
			t.Errorf("CheckSlicePath(%q) warning = %q, want a warning: %v", tc.path, warning, tc.warn)
		}
		if err != nil && !strings.Contains(err.Error(), "kill") {
			t.Errorf("CheckSlicePath(%q) = %v: the error must say why (kubelet kills)", tc.path, err)
		}
	}
}
