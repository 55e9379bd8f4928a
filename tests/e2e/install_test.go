package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/shim/manager"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
)

// TestNodeInstalledByTheProcedure: the node half runs as docs/operator-guide.md's procedure
// installed it ("Node setup": hack/agent-lease-credentials.sh, then deploy/node/install.sh,
// which the stack runs with its own paths and without systemctl, its supervisor playing the
// units). node-ctl and the agent run exactly their installed units' ExecStart, with the
// variables of the installed environment files, from the installed binaries; the
// placeholder shim containerd runs is the installed one, with the agent's address from the
// installed drop-in; and the agent's Lease identity is the service account token the
// script made.
func TestNodeInstalledByTheProcedure(t *testing.T) {
	s := requireStack(t)
	ensureClass(t)
	vars := s.InstallVars()
	for _, u := range []*stack.Unit{s.NodeCtl, s.Agent} {
		want, err := u.Command()
		if err != nil {
			t.Fatal(err)
		}
		pid := u.Pid()
		got, err := cmdline(pid)
		if err != nil {
			t.Fatalf("%s (pid %d): %v", u.Name, pid, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s runs\n  %q\nits installed unit %s says\n  %q", u.Name, got, u.File, want)
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Dir(exe) != vars["BIN_DIR"] {
			t.Errorf("%s runs %s, not a binary install.sh installed into %s", u.Name, exe, vars["BIN_DIR"])
		}
	}
	shims := s.PlaceholderShims()
	if len(shims) == 0 {
		t.Fatal("no placeholder shim runs")
	}
	for pid := range shims {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		wantAddr := "SANDBOXPOOL_AGENT_ADDRESS=" + filepath.Join(vars["RUN_DIR"], "agent.sock")
		if exe != filepath.Join(vars["BIN_DIR"], manager.BinaryName) || !slices.Contains(strings.Split(string(env), "\x00"), wantAddr) {
			t.Errorf("shim %d runs %s with %q; want the installed shim with %s (the installed drop-in)", pid, exe, env, wantAddr)
		}
	}

	// The Lease identity: the kubeconfig hack/agent-lease-credentials.sh wrote, a token of
	// the node's service account.
	agentArgs, err := cmdline(s.Agent.Pid())
	if err != nil {
		t.Fatal(err)
	}
	var leaseKC string
	for _, a := range agentArgs {
		if v, ok := strings.CutPrefix(a, "--lease-kubeconfig="); ok {
			leaseKC = v
		}
	}
	if leaseKC != vars["LEASE_KUBECONFIG"] {
		t.Fatalf("the agent's --lease-kubeconfig %q, want install.sh's LEASE_KUBECONFIG %q", leaseKC, vars["LEASE_KUBECONFIG"])
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", leaseKC)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerTokenFile == "" {
		t.Errorf("the Lease kubeconfig has no tokenFile: %+v", cfg)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := c.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantUser := "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix + nodeName
	if review.Status.UserInfo.Username != wantUser {
		t.Errorf("the Lease identity is %q, want %q", review.Status.UserInfo.Username, wantUser)
	}
	t.Logf("node-ctl and the agent run their installed units; the shim is %s; the Lease identity %s", filepath.Join(vars["BIN_DIR"], manager.BinaryName), review.Status.UserInfo.Username)
}

// cmdline is a process's command line.
func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}
