package nodectltest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestNodeCtlRefusesToStart checks that node-ctl exits non-zero, saying why, when it
// cannot start: a bad flag value, before touching any cgroup.
func TestNodeCtlRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--cgroup-path=sandbox-pool"}, 1, "must be absolute"},
		{[]string{"--cgroup-path=/"}, 1, "must not be the root cgroup"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"--log-level=LOUD"}, 2, "invalid value"},
	} {
		out, err := exec.Command(binary(t, "node-ctl"), tc.args...).CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != tc.code || !strings.Contains(string(out), tc.says) {
			t.Errorf("node-ctl %v = %v, %q; want exit %d saying %q", tc.args, err, out, tc.code, tc.says)
		}
	}
}
