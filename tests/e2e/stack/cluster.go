package stack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/hack/images/oci"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// The cluster half runs as a cluster runs it: the API server listens on the node's address
// on the pod network (the CNI bridge's gateway) and advertises it as the endpoint of the
// `kubernetes` Service; kube-controller-manager (Deployments, ReplicaSets, EndpointSlices,
// service accounts, the kube-root-ca.crt ConfigMaps, …) and kube-scheduler run beside it;
// kube-proxy on the node turns Services into iptables rules. The controller and the webhook
// are the Pods of their Deployments from deploy/: they reach the API server through the
// `kubernetes` Service (in-cluster configuration), and the API server reaches the webhook
// through the webhook's Service (its ClusterIP, which kube-proxy's rules on this host send
// to a ready webhook Pod: the route every kube-apiserver takes that runs on a node with
// kube-proxy).

// Identities of the control plane's own components; the API server's bootstrap RBAC binds
// their roles (system:kube-controller-manager, system:kube-scheduler, system:node-proxier).
const (
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
	proxyUser             = "system:kube-proxy"
)

// kubernetesServiceIP is the `kubernetes` Service's ClusterIP: the first address of the API
// server's --service-cluster-ip-range, which envtest sets to 10.0.0.0/24.
var kubernetesServiceIP = net.IPv4(10, 0, 0, 1)

// The cluster half's Deployments (deploy/controller, deploy/webhook).
const (
	ControllerDeployment = "sandbox-pool-controller"
	WebhookDeployment    = "sandbox-pool-webhook"
)

// DeploymentLabel is the label key of the Deployments' selectors; its value is the
// Deployment's name.
const DeploymentLabel = "app.kubernetes.io/name"

// LeaderElectionLease is the controller replicas' leader-election Lease (operator's
// DefaultLeaderElectionID) in v1alpha1.DefaultSystemNamespace.
const LeaderElectionLease = "sandboxpool-controller." + v1alpha1.GroupName

// clusterAPIServer makes envtest's API server a cluster's: it listens on addr:port only and
// advertises addr; its certificates are the ones writeAPIServerPKI wrote into certDir (with
// the `kubernetes` Service's address); and the ServiceAccount admission plugin, which
// envtest disables, is on, so that Pods get their service account's token.
func clusterAPIServer(certDir string, ca []byte, addr string, port int) framework.Option {
	return func(env *envtest.Environment, _ string) {
		api := env.ControlPlane.GetAPIServer()
		api.CertDir = certDir
		api.SecureServing.ListenAddr = envtest.ListenAddr{Address: addr, Port: strconv.Itoa(port)}
		api.SecureServing.CA = ca
		args := api.Configure()
		args.Set("advertise-address", addr)
		args.Disable("disable-admission-plugins")
	}
}

// auditPolicy records who wrote classes and pools (status included), and the response:
// how tests count the admission errors an identity saw.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources:
  - group: sandboxpool.agentcube.volcano.sh
- level: None
`

// withAudit writes the API server's audit log of pool and class writes to path.
func withAudit(path string) framework.Option {
	return func(env *envtest.Environment, _ string) {
		policy := filepath.Join(filepath.Dir(path), "audit-policy.yaml")
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", path)
		args.Set("audit-log-mode", "blocking") // every event is on disk when the response is
	}
}

// AuditLog is the API server's audit log of class and pool writes (framework.AuditEvents
// reads it).
func (s *Stack) AuditLog() string { return filepath.Join(s.Opts.Dir, "audit", "audit.log") }

// startControlPlane starts etcd and the API server with a cluster's network identity.
func (s *Stack) startControlPlane(ctx context.Context) error {
	o := s.Opts
	pki := filepath.Join(o.Dir, "pki")
	ca, err := writeAPIServerPKI(pki, net.ParseIP(s.Network.Gateway), kubernetesServiceIP)
	if err != nil {
		return fmt.Errorf("the API server's certificates: %w", err)
	}
	s.pki = pki
	port, err := freePortOn(s.Network.Gateway)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.AuditLog()), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.AuditLog()), "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	opts := []framework.Option{framework.WithNodeAuthorizer(), clusterAPIServer(pki, ca, s.Network.Gateway, port), withAudit(s.AuditLog())}
	what := "Node authorizer, default admission plugins"
	if o.NodeRestriction {
		opts, what = append(opts, framework.WithNodeRestriction()), what+" and NodeRestriction"
	}
	o.Logf("starting etcd and kube-apiserver on %s:%d (%s), installing the CRDs", s.Network.Gateway, port, what)
	t0 := time.Now()
	cp, err := framework.Start(opts...)
	if err != nil {
		return err
	}
	s.CP = cp
	s.envtestDirs = []string{cp.Env.ControlPlane.Etcd.DataDir, cp.Env.WebhookInstallOptions.LocalServingCertDir}
	o.Logf("control plane up in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler, each as its own
// identity, straight to the API server (they run beside it, not on the node).
func (s *Stack) startControllers(ctx context.Context) error {
	kcm, err := s.writeKubeconfig("kube-controller-manager.kubeconfig", controllerManagerUser)
	if err != nil {
		return err
	}
	sched, err := s.writeKubeconfig("kube-scheduler.kubeconfig", schedulerUser)
	if err != nil {
		return err
	}
	assets := s.Opts.Tools.KubeAssets
	// Every default controller, each with its own service account's token, as kubeadm runs
	// it; the CA it publishes as kube-root-ca.crt is the serving certificate's. No serving
	// port (--secure-port=0) and no leader election: one of each runs.
	s.ControllerManager = newProc("kube-controller-manager", s.LogDir, filepath.Join(assets, "kube-controller-manager"), []string{
		"--kubeconfig=" + kcm, "--use-service-account-credentials=true",
		"--root-ca-file=" + filepath.Join(s.pki, caFile),
		"--service-account-private-key-file=" + filepath.Join(s.pki, saSignerKeyFile),
		"--leader-elect=false", "--secure-port=0", "--v=1",
	})
	s.Scheduler = newProc("kube-scheduler", s.LogDir, filepath.Join(assets, "kube-scheduler"), []string{
		"--kubeconfig=" + sched, "--leader-elect=false", "--secure-port=0", "--v=1",
	})
	for _, p := range []*Proc{s.ControllerManager, s.Scheduler} {
		s.Opts.Logf("starting %s", p.Name)
		if err := p.Start(); err != nil {
			return err
		}
	}
	// The service account controller makes each namespace's `default` service account; the
	// ServiceAccount admission plugin refuses a pod of a namespace before it has one.
	return waitFor(ctx, s.ControllerManager, time.Minute, func() bool {
		_, err := s.kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

// installCluster applies the cluster half as docs/operator-guide.md tells users to
// ("Install", self-signed), on a copy of deploy/ in the stack's directory (what a user's
// checkout is): hack/webhook-certs.sh writes the webhook's certificate where the
// self-signed component reads it, a kustomization of the stack's own (writeInstall) composes
// the base with that component and sets the images, and `kubectl apply -k` applies it.
func (s *Stack) installCluster(ctx context.Context) error {
	root := s.CP.Root
	deploy := filepath.Join(s.Opts.Dir, "deploy")
	if err := os.RemoveAll(deploy); err != nil {
		return err
	}
	if err := copyTree(filepath.Join(root, "deploy"), deploy, filepath.Join("overlays", "self-signed", "certs")); err != nil {
		return fmt.Errorf("copying deploy/: %w", err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "webhook-certs.sh"), s.WebhookCertDir()).CombinedOutput(); err != nil {
		return fmt.Errorf("hack/webhook-certs.sh: %w: %s", err, out)
	}
	if err := s.writeInstall(); err != nil {
		return err
	}
	s.Opts.Logf("kubectl apply -k %s (the cluster half: %s, %s)", s.InstallDir(), s.images[oci.ControllerImage], s.images[oci.WebhookImage])
	return s.ApplyCluster(ctx)
}

// InstallDir holds the kustomization the cluster half is applied from.
func (s *Stack) InstallDir() string { return filepath.Join(s.Opts.Dir, "install") }

// WebhookCertDir is where hack/webhook-certs.sh writes the webhook's certificate for the
// self-signed component of the stack's copy of deploy/.
func (s *Stack) WebhookCertDir() string {
	return filepath.Join(s.Opts.Dir, "deploy", "overlays", "self-signed", "certs")
}

// ApplyCluster applies the stack's install again (`kubectl apply -k`), as an operator does
// after changing it: a new certificate from hack/webhook-certs.sh, new images (SetImages).
func (s *Stack) ApplyCluster(ctx context.Context) error {
	if out, err := s.Kubectl(ctx, "apply", "-k", s.InstallDir()); err != nil {
		return fmt.Errorf("kubectl apply -k %s: %w: %s", s.InstallDir(), err, out)
	}
	return nil
}

// SetImages points the stack's install at the images of refs (image name → reference), as
// `kustomize edit set image` does; ApplyCluster rolls them out.
func (s *Stack) SetImages(refs map[string]string) error {
	s.images = maps.Clone(refs)
	return s.writeInstall()
}

// installHeader explains the stack's kustomization to whoever reads it.
const installHeader = `# The cluster half of this one-node cluster, as docs/operator-guide.md installs it
# ("Install", self-signed): the base (a copy of the repository's deploy/), the self-signed
# certificate component (hack/webhook-certs.sh wrote its certs/), and the images built by
# make images, imported into the node's containerd, in place of the release's (a tagged
# image's imagePullPolicy is IfNotPresent: nothing is pulled). A one-node cluster needs
# nothing else: both replicas of each Deployment run on the one node (their
# topologySpreadConstraints are ScheduleAnyway), the PodDisruptionBudgets allow one
# disruption each, and the four Pods request 400m cpu and 512Mi memory in all.
`

// writeInstall writes the stack's kustomization (InstallDir): the base, the self-signed
// component, the images, and the controller flags of the stack's timers where they differ
// from the Deployment's (a later flag wins).
func (s *Stack) writeInstall() error {
	var images []map[string]string
	for _, name := range slices.Sorted(maps.Keys(s.images)) {
		ref := s.images[name]
		i := strings.LastIndex(ref, ":")
		if i < 0 || strings.Contains(ref[i:], "/") {
			return fmt.Errorf("image reference %q has no tag", ref)
		}
		images = append(images, map[string]string{"name": oci.DefaultOptions().Repo + "/" + name, "newName": ref[:i], "newTag": ref[i+1:]})
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": []string{"../deploy"}, "components": []string{"../deploy/overlays/self-signed"},
		"images": images,
	}
	header := installHeader
	if flags := s.controllerFlags(); len(flags) > 0 {
		var ops []map[string]any
		for _, f := range flags {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": f})
		}
		patch, err := yaml.Marshal(ops)
		if err != nil {
			return err
		}
		k["patches"] = []map[string]any{{
			"target": map[string]string{"kind": "Deployment", "name": ControllerDeployment},
			"patch":  string(patch),
		}}
		header += "# The end-to-end suite adds its shortened timers to the controller's flags (patches).\n"
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.InstallDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.InstallDir(), "kustomization.yaml"), append([]byte(header), b...), 0o644)
}

// controllerFlags are the controller flags the stack's timers change from the Deployment's.
func (s *Stack) controllerFlags() []string {
	t, d := s.Opts.Timers, DefaultTimers()
	var out []string
	if t.LeaseTTL != d.LeaseTTL {
		out = append(out, "--lease-ttl="+t.LeaseTTL.String())
	}
	if t.NodeCtlUnreadyAfter != d.NodeCtlUnreadyAfter {
		out = append(out, "--nodectl-unready-after="+t.NodeCtlUnreadyAfter.String())
	}
	if t.FinalizerTimeout != d.FinalizerTimeout {
		out = append(out, "--finalizer-timeout="+t.FinalizerTimeout.String())
	}
	return out
}

// copyTree copies the regular files below src to dst, leaving out skip (relative to src).
func copyTree(src, dst, skip string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == skip {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// WaitCluster waits until both Deployments have rolled out, the webhook answers through its
// Service (a dry-run create reaches it) and a controller replica leads (LiveLeader).
func (s *Stack) WaitCluster(ctx context.Context, timeout time.Duration) error {
	t0 := time.Now()
	var last string
	err := waitFor(ctx, s.Kubelet, timeout, func() bool {
		for _, name := range []string{WebhookDeployment, ControllerDeployment} {
			if ok, why := s.RolledOut(ctx, name); !ok {
				last = why
				return false
			}
		}
		if err := s.WebhookAnswers(ctx); err != nil {
			last = err.Error()
			return false
		}
		if _, err := s.LiveLeader(ctx); err != nil {
			last = err.Error()
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("the cluster half (deploy/) is not running: %s: %w", last, err)
	}
	s.Opts.Logf("controller and webhook Pods running from deploy/ in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// RolledOut reports whether the Deployment name has rolled out (kubectl rollout status's
// test: the current generation observed, every replica updated and available, no old one
// left), and why not.
func (s *Stack) RolledOut(ctx context.Context, name string) (bool, string) {
	d, err := s.kube.AppsV1().Deployments(v1alpha1.DefaultSystemNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	ok := st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
	return ok, fmt.Sprintf("deployment %s: %d/%d updated, %d available, %d in all", name, st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas)
}

// WebhookAnswers makes the API server call the webhook: a dry-run create of a class (a
// dry run calls webhooks without side effects). An answer, allow or deny, is enough.
func (s *Stack) WebhookAnswers(ctx context.Context) error {
	class := wrappers.MakeClass("stack-webhook-probe").Selector("sandboxpool.e2e/probe", "none").Resources("100m", "64Mi").Obj()
	body, err := yaml.Marshal(class)
	if err != nil {
		return err
	}
	err = s.kube.RESTClient().Post().AbsPath("/apis", v1alpha1.SchemeGroupVersion.Group, v1alpha1.SchemeGroupVersion.Version, "sandboxpoolclasses").
		Param("dryRun", "All").SetHeader("Content-Type", "application/yaml").Body(body).Do(ctx).Error()
	if err == nil || (apierrors.IsForbidden(err) && strings.Contains(err.Error(), "admission webhook")) {
		return nil
	}
	return fmt.Errorf("the webhook through its Service: %w", err)
}

// leaderRenewedWithin is how recently a live leader has renewed its Lease: it renews every
// --leader-retry-period (2 s).
const leaderRenewedWithin = 6 * time.Second

// LiveLeader is the controller Pod that leads now: it holds the leader-election Lease, has
// renewed it lately, and runs. A leader that died without releasing the Lease (its node
// went down) still holds it until --leader-lease-duration (15 s) has passed; a Pod of the
// same name started again is another process, which must wait for that too.
func (s *Stack) LiveLeader(ctx context.Context) (string, error) {
	l, err := s.kube.CoordinationV1().Leases(v1alpha1.DefaultSystemNamespace).Get(ctx, LeaderElectionLease, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("leader-election lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return "", errors.New("no controller replica leads")
	}
	if age := time.Since(l.Spec.RenewTime.Time); age > leaderRenewedWithin {
		return "", fmt.Errorf("the leader %s last renewed %s ago", *l.Spec.HolderIdentity, age.Round(time.Second))
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	pods, err := s.ClusterPods(ctx, ControllerDeployment)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.Name == pod && p.Status.Phase == corev1.PodRunning {
			return pod, nil
		}
	}
	return "", fmt.Errorf("the leader %s is not a running controller Pod", pod)
}

// ClusterPods are the live Pods of the Deployment name — not being deleted, not failed or
// succeeded (a Pod kubelet evicted stays Failed until it is garbage collected) — by name.
func (s *Stack) ClusterPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	list, err := s.kube.CoreV1().Pods(v1alpha1.DefaultSystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: DeploymentLabel + "=" + name})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Deployment returns the Deployment name of the cluster half.
func (s *Stack) Deployment(ctx context.Context, name string) (*appsv1.Deployment, error) {
	return s.kube.AppsV1().Deployments(v1alpha1.DefaultSystemNamespace).Get(ctx, name, metav1.GetOptions{})
}

// PodLog is the end (n lines) of the current log of every container of the pod name in
// namespace, from the files kubelet writes (kubelet serves no API here, so `kubectl logs`
// cannot reach it).
func (s *Stack) PodLog(namespace, name string, n int) string {
	dirs, _ := filepath.Glob(filepath.Join(s.paths.podLogs, namespace+"_"+name+"_*"))
	var b strings.Builder
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*", "*.log"))
		slices.Sort(files)
		for _, f := range files {
			fmt.Fprintf(&b, "== %s\n%s\n", f, support.Tail(f, n))
		}
	}
	return b.String()
}

// freePortOn returns a free TCP port on addr.
func freePortOn(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("no free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
