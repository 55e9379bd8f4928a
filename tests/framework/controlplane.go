// Package framework starts the real control plane the integration and end-to-end tests
// run against: etcd and kube-apiserver built from the module proxy by `make tools`
// (KUBEBUILDER_ASSETS points at them), with the CRDs installed the way users install
// them, `kubectl apply -f deploy/crds/`.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentcube/sandboxpool/schema/corpus"
)

// RequireToolsEnv, when set (make test sets it), turns a missing tool into a failure
// instead of a skip, so CI can never pass by skipping the real parts.
const RequireToolsEnv = "SANDBOXPOOL_REQUIRE_TOOLS"

// ControlPlane is a running etcd + kube-apiserver with the CRDs installed.
type ControlPlane struct {
	Env        *envtest.Environment
	Config     *rest.Config
	Root       string // repository root
	kubectl    string
	kubeconfig string
	// restarted are kube-apiservers started again by KillAPIServer's restart.
	restarted []*os.Process
}

// Unavailable says why the control plane cannot start here, or "" when it can.
func Unavailable() string {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return "KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds kube-apiserver, etcd and kubectl"
	}
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return fmt.Sprintf("%s missing in KUBEBUILDER_ASSETS=%s: run `make tools`", bin, assets)
		}
	}
	return ""
}

// Require skips t when the control plane is unavailable, or fails it when the run demands
// the real parts (RequireToolsEnv).
func Require(t testing.TB, cp *ControlPlane, startErr error) {
	t.Helper()
	if why := Unavailable(); why != "" {
		if os.Getenv(RequireToolsEnv) != "" {
			t.Fatalf("control plane required but unavailable: %s", why)
		}
		t.Skip(why)
	}
	if startErr != nil {
		t.Fatalf("starting the control plane: %v", startErr)
	}
	if cp == nil {
		t.Fatal("control plane not started")
	}
}

// Option configures Start.
type Option func(*envtest.Environment, string)

// WithWebhooks registers the webhook configurations in the files below dir (relative to the
// repository root), with their clientConfig pointed at a local server that the test runs
// with the serving certificate in WebhookOptions().LocalServingCertDir.
func WithWebhooks(dir string) Option {
	return func(env *envtest.Environment, root string) {
		env.WebhookInstallOptions.Paths = append(env.WebhookInstallOptions.Paths, filepath.Join(root, dir))
	}
}

// Start starts etcd and kube-apiserver and installs the CRDs with kubectl.
func Start(opts ...Option) (*ControlPlane, error) {
	if why := Unavailable(); why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	root, err := corpus.RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{ErrorIfCRDPathMissing: true}
	for _, o := range opts {
		o(env, root)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	cp := &ControlPlane{Env: env, Config: cfg, Root: root, kubectl: filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")}
	if err := cp.writeKubeconfig(); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if err := cp.InstallCRDs(); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// writeKubeconfig writes an admin kubeconfig for the kubectl binary.
func (c *ControlPlane) writeKubeconfig() error {
	user, err := c.Env.ControlPlane.AddUser(envtestUser("admin-kubectl", "system:masters"), nil)
	if err != nil {
		return fmt.Errorf("adding the kubectl user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	dir, err := os.MkdirTemp("", "sandboxpool-kubectl-")
	if err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	return os.WriteFile(c.kubeconfig, kc, 0o600)
}

// InstallCRDs runs `kubectl apply -f deploy/crds/` and waits until the CRDs are Established.
func (c *ControlPlane) InstallCRDs() error {
	if _, stderr, err := c.Kubectl(context.Background(), nil, "apply", "-f", filepath.Join(c.Root, "deploy", "crds")); err != nil {
		return fmt.Errorf("kubectl apply -f deploy/crds: %w: %s", err, stderr)
	}
	if _, stderr, err := c.Kubectl(context.Background(), nil, "wait", "--for=condition=Established",
		"--timeout=60s", "-f", filepath.Join(c.Root, "deploy", "crds")); err != nil {
		return fmt.Errorf("waiting for the CRDs: %w: %s", err, stderr)
	}
	return nil
}

// Kubectl runs the built kubectl as cluster admin, with stdin when given.
func (c *ControlPlane) Kubectl(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &o, &e
	err = cmd.Run()
	return o.String(), strings.TrimSpace(e.String()), err
}

// KubectlEnv is the environment that makes a script's kubectl this control plane's admin
// one: KUBECTL (the built binary, for scripts that honour it), KUBECONFIG and PATH.
func (c *ControlPlane) KubectlEnv() []string {
	return []string{"KUBECTL=" + c.kubectl, "KUBECONFIG=" + c.kubeconfig,
		"PATH=" + filepath.Dir(c.kubectl) + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// ApplyDeploy runs kubectl apply -f on each path under deploy/, in order, as an operator
// installs them (namespace.yaml before rbac: the Lease Role lives in its namespace).
func (c *ControlPlane) ApplyDeploy(ctx context.Context, paths ...string) error {
	for _, p := range paths {
		if _, stderr, err := c.Kubectl(ctx, nil, "apply", "-f", filepath.Join(c.Root, "deploy", p)); err != nil {
			return fmt.Errorf("kubectl apply -f deploy/%s: %w: %s", p, err, stderr)
		}
	}
	return nil
}

// WebhookOptions says where the API server expects the webhook server registered with
// WithWebhooks: LocalServingHost, LocalServingPort and LocalServingCertDir.
func (c *ControlPlane) WebhookOptions() envtest.WebhookInstallOptions {
	return c.Env.WebhookInstallOptions
}

// AddUser returns a client configuration authenticated as name in groups, with a client
// certificate, the way a kubelet or a service account reaches the API server.
func (c *ControlPlane) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := c.Env.AddUser(envtestUser(name, groups...), nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return u.Config(), nil
}

// Stop stops the control plane.
func (c *ControlPlane) Stop() error {
	for _, p := range c.restarted {
		_ = p.Kill()
	}
	if c.kubeconfig != "" {
		_ = os.RemoveAll(filepath.Dir(c.kubeconfig))
	}
	err := c.Env.Stop()
	if log := c.AuditLog(); strings.HasPrefix(filepath.Base(filepath.Dir(log)), auditDirPrefix) {
		_ = os.RemoveAll(filepath.Dir(log))
	}
	return err
}

// Suite is a test package's control plane, started once by Run.
type Suite struct {
	CP  *ControlPlane
	Err error // why starting or setting up failed
}

// Require returns the running control plane, skipping or failing t like the package
// function Require.
func (s *Suite) Require(t testing.TB) *ControlPlane {
	t.Helper()
	Require(t, s.CP, s.Err)
	return s.CP
}

// Run is a test package's TestMain body: it starts the control plane when the tools are
// there, runs setUp (with a context cancelled after the tests), runs the tests and stops
// everything. It returns the exit code for os.Exit.
func Run(m *testing.M, s *Suite, setUp func(context.Context, *ControlPlane) error, opts ...Option) int {
	ctx, cancel := context.WithCancel(context.Background())
	if Unavailable() == "" {
		s.CP, s.Err = Start(opts...)
		if s.Err == nil && setUp != nil {
			s.Err = setUp(ctx, s.CP)
		}
	}
	code := m.Run()
	cancel()
	if s.CP != nil {
		if err := s.CP.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	return code
}
