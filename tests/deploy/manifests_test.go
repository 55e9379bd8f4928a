package deploy

import (
	"errors"
	"flag"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/hack/images/oci"
	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/webhook"
)

const (
	controllerName = "sandbox-pool-controller"
	certManager    = "overlays/cert-manager"
)

// flagValues reads --name=value arguments (the form the manifests use) into a map.
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("argument %q is not --name=value", a)
		}
		m[name] = value
	}
	return m
}

// port returns the port of a listen address such as ":8080".
func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// containerPort returns the number of the named port of c.
func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// checkPodSpec holds every Deployment to the same production rules.
func checkPodSpec(t *testing.T, d *appsv1.Deployment, healthPort, metricsPort int32) corev1.Container {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("%s: replicas %v, want at least 2", d.Name, d.Spec.Replicas)
	}
	ps := d.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", d.Name, len(ps.Containers))
	}
	c := ps.Containers[0]
	if !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") {
		t.Errorf("%s: image %q has no pinned tag", d.Name, c.Image)
	}
	if psc := ps.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and the RuntimeDefault seccomp profile", d.Name, psc)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: container securityContext %+v, want a read-only root, no privilege escalation, all capabilities dropped", d.Name, sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s, limit %s: want both, request <= limit", d.Name, r, req.String(), lim.String())
		}
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe ||
			p.HTTPGet.Port != intstr.FromString("health") {
			t.Errorf("%s: probe %s is %+v, want GET %s on the port named health", d.Name, probe, p, probe)
		}
	}
	if got := containerPort(t, c, "health"); got != healthPort {
		t.Errorf("%s: port health is %d, the health flag says %d", d.Name, got, healthPort)
	}
	if got := containerPort(t, c, "metrics"); got != metricsPort {
		t.Errorf("%s: port metrics is %d, the metrics flag says %d", d.Name, got, metricsPort)
	}
	return c
}

// checkImage: the Deployment runs the image `make images` builds as name (hack/images/oci)
// as that image is made: its repository, the image's own entrypoint (the binary is the
// image's only file, so a command would name nothing else) and a non-root user (the
// Deployment's, or else the image's numeric one). checkPodSpec holds it to a read-only
// root file system, which the binaries never write to.
func checkImage(t *testing.T, d *appsv1.Deployment, name string) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	repo := c.Image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	if want := oci.DefaultOptions().Repo + "/" + name; repo != want {
		t.Errorf("%s: image %q, want %s, the repository make images names the image (kustomize's images: swaps it)", d.Name, c.Image, want)
	}
	if len(c.Command) != 0 && !slices.Equal(c.Command, []string{"/" + name}) {
		t.Errorf("%s: command %v, but the image holds only /%s (its entrypoint)", d.Name, c.Command, name)
	}
	imageUID, err := strconv.ParseInt(strings.Split(oci.User, ":")[0], 10, 64)
	if err != nil || imageUID == 0 {
		t.Fatalf("image user %q: want a numeric non-root uid (%v)", oci.User, err)
	}
	uid := &imageUID
	if psc := d.Spec.Template.Spec.SecurityContext; psc != nil && psc.RunAsUser != nil {
		uid = psc.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if *uid == 0 {
		t.Errorf("%s: runs as uid 0, want non-root", d.Name)
	}
}

// checkPDB: a PodDisruptionBudget keeps at least one replica of d through a drain.
func checkPDB(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "PodDisruptionBudget" || o.GetNamespace() != d.Namespace {
			continue
		}
		pdb := typed[policyv1.PodDisruptionBudget](t, o)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		allowed := int32(0)
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			allowed = pdb.Spec.MaxUnavailable.IntVal
		case pdb.Spec.MinAvailable != nil:
			allowed = *d.Spec.Replicas - pdb.Spec.MinAvailable.IntVal
		}
		if allowed < 1 || allowed >= *d.Spec.Replicas {
			t.Errorf("%s: PodDisruptionBudget %s allows %d of %d replicas down, want at least 1 and not all", d.Name, pdb.Name, allowed, *d.Spec.Replicas)
		}
		return
	}
	t.Errorf("%s: no PodDisruptionBudget selects its pods", d.Name)
}

// TestControllerDeployment: the controller's arguments parse with the controller's own
// flags (operator.Options, zap, kubeconfig, as cmd/sandboxpool-controller binds them) and
// pass its validation; ports, probes and namespaces agree with them.
func TestControllerDeployment(t *testing.T) {
	cp := suite.Require(t)
	objs := build(t, cp, filepath.Join(cp.Root, "deploy"))
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", controllerName))

	args := d.Spec.Template.Spec.Containers[0].Args
	fs := flag.NewFlagSet("sandboxpool-controller", flag.ContinueOnError)
	opts := operator.DefaultOptions()
	opts.AddFlags(fs)
	(&zap.Options{}).BindFlags(fs)
	config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("controller args %v: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Errorf("controller args: positional %v", fs.Args())
	}
	if err := opts.Validate(); err != nil {
		t.Errorf("controller args: %v", err)
	}
	if !opts.LeaderElection {
		t.Error("leader election is off with more than one replica")
	}
	if opts.LeaderElectionNamespace != d.Namespace {
		t.Errorf("--leader-election-namespace %q, want the install's namespace %q", opts.LeaderElectionNamespace, d.Namespace)
	}
	// The agents' Leases live apart from the leader-election Lease: the agents' Role grants
	// Leases in that namespace only (deploy/rbac).
	if opts.LeaseNamespace != v1alpha1.DefaultLeaseNamespace {
		t.Errorf("--lease-namespace %q, want %q (the namespace of the agents' Lease Role)", opts.LeaseNamespace, v1alpha1.DefaultLeaseNamespace)
	}
	// The leader-election Role names the Lease the controller elects with.
	role := typed[rbacv1.Role](t, find(t, objs, "Role", "sandbox-pool-controller-leader-election"))
	if role.Namespace != opts.LeaderElectionNamespace || !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.ResourceNames, opts.LeaderElectionID) && slices.Contains(r.Verbs, "update")
	}) {
		t.Errorf("Role %s/%s does not let the controller renew its leader-election Lease %s/%s: %+v",
			role.Namespace, role.Name, opts.LeaderElectionNamespace, opts.LeaderElectionID, role.Rules)
	}
	checkPodSpec(t, d, port(t, opts.ProbeAddr), port(t, opts.MetricsAddr))
	checkImage(t, d, oci.ControllerImage)
	checkPDB(t, objs, d)
}

// TestNodePolicyNames: the node admission policy and its binding name the Lease namespace
// and the Lease identities the agents and the controller use (schema/v1alpha1), and the
// operator binding names the group the webhook holds to spec.override.
func TestNodePolicyNames(t *testing.T) {
	cp := suite.Require(t)
	objs := build(t, cp, filepath.Join(cp.Root, "deploy"))
	leasePolicy := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, find(t, objs, "ValidatingAdmissionPolicy", "sandbox-pool-node-lease"))
	saPrefix := "system:serviceaccount:" + v1alpha1.DefaultLeaseNamespace + ":" + v1alpha1.LeaseServiceAccountPrefix
	found := false
	for _, v := range leasePolicy.Spec.Variables {
		if v.Name == "leaseSAPrefix" {
			found = v.Expression == "'"+saPrefix+"'"
		}
	}
	if !found {
		t.Errorf("the Lease policy's leaseSAPrefix is not '%s': %+v", saPrefix, leasePolicy.Spec.Variables)
	}
	binding := typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, find(t, objs, "ValidatingAdmissionPolicyBinding", "sandbox-pool-node-lease"))
	if sel := binding.Spec.MatchResources.NamespaceSelector; sel == nil || sel.MatchLabels[corev1.LabelMetadataName] != v1alpha1.DefaultLeaseNamespace {
		t.Errorf("the Lease policy binding selects %+v, want the namespace %s", sel, v1alpha1.DefaultLeaseNamespace)
	}
	if !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("the Lease policy binding's actions are %v, want [Deny]", binding.Spec.ValidationActions)
	}

	op := typed[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", "sandbox-pool-operator"))
	if len(op.Subjects) != 1 || op.Subjects[0].Kind != rbacv1.GroupKind || op.Subjects[0].Name != v1alpha1.OperatorGroup {
		t.Errorf("the operator role is bound to %+v, want the group %s", op.Subjects, v1alpha1.OperatorGroup)
	}
	wh := typed[appsv1.Deployment](t, find(t, objs, "Deployment", webhookName))
	if f := flagValues(t, wh.Spec.Template.Spec.Containers[0].Args); !slices.Contains(strings.Split(f["operator-groups"], ","), v1alpha1.OperatorGroup) {
		t.Errorf("the webhook's --operator-groups=%s does not name %s", f["operator-groups"], v1alpha1.OperatorGroup)
	}
}

// TestWebhookDeployment: the webhook's arguments are flags the real binary accepts (it
// binds them in main, so the binary is run with them and a kubeconfig that does not exist:
// it must fail on the kubeconfig, not on a flag), and the Deployment, Service,
// ValidatingWebhookConfiguration and the controller's identity agree with each other.
func TestWebhookDeployment(t *testing.T) {
	cp := suite.Require(t)
	objs := build(t, cp, filepath.Join(cp.Root, "deploy"))
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", webhookName))
	args := d.Spec.Template.Spec.Containers[0].Args

	bin, err := support.BuildBinary(cp.Root, t.TempDir(), "./cmd/sandboxpool-webhook")
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	run := func(args ...string) (int, string) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if exit != nil {
			return exit.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	// What a flag error looks like, so the check below can tell the two apart.
	if code, out := run(append(slices.Clone(args), "--no-such-flag", "--kubeconfig="+missing)...); code != 2 || !strings.Contains(out, "flag provided but not defined") {
		t.Fatalf("an unknown flag: exit %d, %s", code, out)
	}
	if code, out := run(append(slices.Clone(args), "--kubeconfig="+missing)...); code != 1 || !strings.Contains(out, "loading kubeconfig") {
		t.Errorf("webhook args %v: exit %d, want 1 from loading the kubeconfig:\n%s", args, code, out)
	}

	f := flagValues(t, args)
	c := checkPodSpec(t, d, port(t, f["health-addr"]), port(t, f["metrics-addr"]))
	checkImage(t, d, oci.WebhookImage)
	checkPDB(t, objs, d)
	servePort := port(t, f["addr"])
	if got := containerPort(t, c, "webhook"); got != servePort {
		t.Errorf("port webhook is %d, --addr says %d", got, servePort)
	}

	// --cert-dir is the Secret the certificate components fill.
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != f["cert-dir"] {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == certSecret {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--cert-dir %s is not the Secret %s mounted", f["cert-dir"], certSecret)
	}

	// Status scoping trusts the controller by its service account's username.
	ctrl := typed[appsv1.Deployment](t, find(t, objs, "Deployment", controllerName))
	user := "system:serviceaccount:" + ctrl.Namespace + ":" + ctrl.Spec.Template.Spec.ServiceAccountName
	if !slices.Contains(strings.Split(f["controller-usernames"], ","), user) {
		t.Errorf("--controller-usernames=%s does not trust the controller's identity %s", f["controller-usernames"], user)
	}
	if user != policy.DefaultControllerUsername {
		t.Errorf("the controller runs as %s, the policy's default is %s", user, policy.DefaultControllerUsername)
	}

	// The ValidatingWebhookConfiguration reaches the pods through the Service.
	svc := typed[corev1.Service](t, find(t, objs, "Service", webhookName))
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, find(t, objs, "ValidatingWebhookConfiguration", vwcName))
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(svc.Spec.Selector) == 0 || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Service %s selects %v, not the webhook's pods %v", svc.Name, svc.Spec.Selector, d.Spec.Template.Labels)
	}
	for _, w := range vwc.Webhooks {
		ref := w.ClientConfig.Service
		if ref == nil || ref.Name != svc.Name || ref.Namespace != svc.Namespace || ref.Path == nil || *ref.Path != webhook.ValidatePath {
			t.Errorf("webhook %s calls %+v, want Service %s/%s at %s", w.Name, ref, svc.Namespace, svc.Name, webhook.ValidatePath)
			continue
		}
		found := false
		for _, p := range svc.Spec.Ports {
			if ref.Port != nil && p.Port == *ref.Port {
				found = true
				if tp := p.TargetPort; tp != intstr.FromString("webhook") && tp != intstr.FromInt32(servePort) {
					t.Errorf("Service port %d goes to %s, not the webhook's port", p.Port, tp.String())
				}
			}
		}
		if !found {
			t.Errorf("webhook %s calls port %v, which the Service does not have", w.Name, ref.Port)
		}
	}
}

// TestCertManagerComponent: base + deploy/overlays/cert-manager renders the Issuer and the
// Certificate, whose Secret is the one the webhook mounts, whose DNS names cover the
// Service, and which the configuration's CA-injection annotation names. Nothing else of
// the base changes. (cert-manager's CRDs are not installed on the test API server: the
// component is rendered with `kubectl kustomize`, not applied.)
func TestCertManagerComponent(t *testing.T) {
	cp := suite.Require(t)
	install, _ := installTree(t, cp.Root, certManager)
	objs := build(t, cp, install)
	base := build(t, cp, filepath.Join(cp.Root, "deploy"))

	cert := find(t, objs, "Certificate", certSecret)
	issuer := find(t, objs, "Issuer", "sandbox-pool-selfsigned")
	if cert.GetNamespace() != namespace || issuer.GetNamespace() != namespace {
		t.Errorf("Certificate in %q, Issuer in %q, want %q", cert.GetNamespace(), issuer.GetNamespace(), namespace)
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	if secretName != certSecret {
		t.Errorf("Certificate secretName %q, the webhook mounts %q", secretName, certSecret)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dnsNames, webhookDNS) {
		t.Errorf("Certificate dnsNames %v, want %s", dnsNames, webhookDNS)
	}
	ref, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	if ref != issuer.GetName() {
		t.Errorf("Certificate issuerRef %q, the Issuer is %q", ref, issuer.GetName())
	}
	vwc := find(t, objs, "ValidatingWebhookConfiguration", vwcName)
	if got, want := vwc.GetAnnotations()[injectCAFrom], cert.GetNamespace()+"/"+cert.GetName(); got != want {
		t.Errorf("%s: %q, want %q", injectCAFrom, got, want)
	}
	if len(objs) != len(base)+2 {
		t.Errorf("base + cert-manager renders %d objects, want the base's %d + Issuer and Certificate", len(objs), len(base))
	}
	for _, b := range base {
		if o := find(t, objs, b.GetKind(), b.GetName()); !equality.Semantic.DeepEqual(o.Object, b.Object) {
			t.Errorf("the component changes %s", key(b))
		}
	}
}

// TestOffPoolNodesComponent: with deploy/overlays/off-pool-nodes, the controller's and the
// webhook's Pods require a node that carries none of the label keys the example classes
// select by, and nothing else of the base changes.
func TestOffPoolNodesComponent(t *testing.T) {
	cp := suite.Require(t)
	install, _ := installTree(t, cp.Root, "overlays/off-pool-nodes")
	objs := build(t, cp, install)
	base := build(t, cp, filepath.Join(cp.Root, "deploy"))

	var keys []string
	for _, f := range readManifests(t, filepath.Join(cp.Root, "examples")) {
		if f.GetKind() != v1alpha1.KindSandboxPoolClass {
			continue
		}
		labels, _, _ := unstructured.NestedStringMap(f.Object, "spec", "selector", "matchLabels")
		for k := range labels {
			keys = append(keys, k)
		}
		exprs, _, _ := unstructured.NestedSlice(f.Object, "spec", "selector", "matchExpressions")
		for _, e := range exprs {
			if k, ok := e.(map[string]any)["key"].(string); ok {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		t.Fatal("no selector keys in examples/")
	}
	for _, name := range []string{controllerName, webhookName} {
		d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", name))
		a := d.Spec.Template.Spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
			len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
			t.Errorf("%s: affinity %+v, want one required node selector term", name, a)
			continue
		}
		term := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
		for _, k := range keys {
			if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
				return r.Key == k && r.Operator == corev1.NodeSelectorOpDoesNotExist
			}) {
				t.Errorf("%s: no %s DoesNotExist in %+v: a node an example class selects could run it", name, k, term.MatchExpressions)
			}
		}
		// Without the affinity it is the base's Deployment.
		b := typed[appsv1.Deployment](t, find(t, base, "Deployment", name))
		d.Spec.Template.Spec.Affinity = b.Spec.Template.Spec.Affinity
		if !equality.Semantic.DeepEqual(d, b) {
			t.Errorf("the component changes more of %s than its affinity", name)
		}
	}
	if len(objs) != len(base) {
		t.Errorf("base + off-pool-nodes renders %d objects, the base %d", len(objs), len(base))
	}
	for _, b := range base {
		if b.GetKind() == "Deployment" {
			continue
		}
		if o := find(t, objs, b.GetKind(), b.GetName()); !equality.Semantic.DeepEqual(o.Object, b.Object) {
			t.Errorf("the component changes %s", key(b))
		}
	}
}
