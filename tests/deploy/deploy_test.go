package deploy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/tests/framework"
)

const (
	namespace     = "sandbox-pool-system"
	webhookName   = "sandbox-pool-webhook"
	vwcName       = "sandbox-pool-validating-webhook"
	certSecret    = "sandbox-pool-webhook-cert"
	webhookDNS    = webhookName + "." + namespace + ".svc"
	injectCAFrom  = "cert-manager.io/inject-ca-from"
	selfSignedDir = "overlays/self-signed"
)

// TestBaseListsEveryManifest: the base renders every object of the files it is made of, so
// a manifest added to deploy/crds, deploy/rbac, deploy/controller or deploy/webhook (the
// base lists files one by one) cannot be left out of `kubectl apply -k deploy/`.
func TestBaseListsEveryManifest(t *testing.T) {
	cp := suite.Require(t)
	built := map[string]bool{}
	for _, o := range build(t, cp, filepath.Join(cp.Root, "deploy")) {
		built[key(o)] = true
	}
	var want []*unstructured.Unstructured
	for _, p := range []string{"namespace.yaml", "runtimeclass.yaml", "placeholder-pod-policy.yaml", "crds", "rbac", "controller", "webhook"} {
		want = append(want, readManifests(t, filepath.Join(cp.Root, "deploy", p))...)
	}
	for _, o := range want {
		if !built[key(o)] {
			t.Errorf("%s is in deploy/ but not in `kubectl kustomize deploy/`", key(o))
		}
	}
	if len(built) != len(want) {
		t.Errorf("the base renders %d objects, its files hold %d", len(built), len(want))
	}
}

// TestInstall applies the base as users do, then the self-signed certificate component on
// top, against a real API server: server-side dry run first, then for real.
func TestInstall(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(cp.Root, "deploy")
	objs := build(t, cp, base)

	t.Run("dry run", func(t *testing.T) {
		// Server-side dry run creates nothing, so the namespaced objects need their
		// namespace to exist already; everything else is validated on a fresh cluster.
		if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "-f", filepath.Join(base, "namespace.yaml")); err != nil {
			t.Fatalf("kubectl apply -f deploy/namespace.yaml: %v: %s", err, stderr)
		}
		out, stderr, err := cp.Kubectl(ctx, nil, "apply", "--dry-run=server", "-k", base)
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server -k deploy/: %v: %s", err, stderr)
		}
		if n := strings.Count(out, "(server dry run)"); n != len(objs) {
			t.Errorf("dry run answered for %d objects, the base has %d:\n%s", n, len(objs), out)
		}
	})

	t.Run("apply", func(t *testing.T) {
		out, stderr, err := cp.Kubectl(ctx, nil, "apply", "-k", base)
		if err != nil {
			t.Fatalf("kubectl apply -k deploy/: %v: %s", err, stderr)
		}
		// Pod Security warns (the namespace's warn=restricted) about any pod template
		// that is not restricted; the API server warns about deprecated APIs.
		if strings.Contains(stderr, "Warning") {
			t.Errorf("kubectl apply -k deploy/ warned:\n%s", stderr)
		}
		t.Logf("kubectl apply -k deploy/:\n%s", out)
	})

	t.Run("every object exists", func(t *testing.T) {
		for _, o := range objs {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
				t.Errorf("%s: %v", key(o), err)
			}
		}
	})

	t.Run("apply again changes nothing", func(t *testing.T) {
		noDiff(t, cp, base)
	})

	t.Run("service accounts exist", func(t *testing.T) {
		var names []string
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment":
				d := typed[appsv1.Deployment](t, o)
				if d.Spec.Template.Spec.ServiceAccountName == "" {
					t.Errorf("%s runs as the namespace's default service account", key(o))
				}
				names = append(names, d.Namespace+"/"+d.Spec.Template.Spec.ServiceAccountName)
			case "ClusterRoleBinding":
				for _, s := range typed[rbacv1.ClusterRoleBinding](t, o).Subjects {
					if s.Kind == rbacv1.ServiceAccountKind {
						names = append(names, s.Namespace+"/"+s.Name)
					}
				}
			}
		}
		if len(names) == 0 {
			t.Fatal("no service account referenced")
		}
		for _, n := range names {
			ns, name, _ := strings.Cut(n, "/")
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ServiceAccount{}); err != nil {
				t.Errorf("service account %s: %v", n, err)
			}
		}
	})

	t.Run("self-signed component", func(t *testing.T) {
		install, deployCopy := installTree(t, cp.Root, selfSignedDir)
		certs := filepath.Join(deployCopy, selfSignedDir, "certs")
		cmd := exec.Command("bash", filepath.Join(cp.Root, "hack", "webhook-certs.sh"), certs)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/webhook-certs.sh: %v: %s", err, out)
		}
		if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "--dry-run=server", "-k", install); err != nil {
			t.Fatalf("kubectl apply --dry-run=server -k (base + self-signed): %v: %s", err, stderr)
		}
		if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "-k", install); err != nil {
			t.Fatalf("kubectl apply -k (base + self-signed): %v: %s", err, stderr)
		}

		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: certSecret}, &secret); err != nil {
			t.Fatal(err)
		}
		if secret.Type != corev1.SecretTypeTLS {
			t.Errorf("secret type %s, want %s", secret.Type, corev1.SecretTypeTLS)
		}
		if _, ok := secret.Data["ca.key"]; ok {
			t.Error("the CA's key is in the Secret")
		}
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: vwcName}, &vwc); err != nil {
			t.Fatal(err)
		}
		if _, ok := vwc.Annotations[injectCAFrom]; ok {
			t.Errorf("%s is still set without cert-manager", injectCAFrom)
		}
		for _, w := range vwc.Webhooks {
			if string(w.ClientConfig.CABundle) != string(secret.Data["ca.crt"]) {
				t.Errorf("webhook %s: caBundle is not the Secret's ca.crt", w.Name)
			}
		}
		verifyServingCert(t, secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey], vwc.Webhooks[0].ClientConfig.CABundle)

		noDiff(t, cp, install)
	})
}

// noDiff: `kubectl diff -k dir` (a server-side dry run of the apply, compared with the live
// objects) finds nothing to change. kubectl apply's own "configured" is no test: it patches
// a PodDisruptionBudget's selector (patchStrategy replace) on every apply.
func noDiff(t *testing.T, cp *framework.ControlPlane, dir string) {
	t.Helper()
	out, stderr, err := cp.Kubectl(context.Background(), nil, "diff", "-k", dir)
	if err != nil {
		t.Errorf("kubectl diff -k %s: %v: %s\n%s", dir, err, stderr, out)
	}
}

// verifyServingCert checks what the API server will check when it calls the webhook: the
// certificate chains to caBundle for the Service's DNS name, and the key belongs to it.
func verifyServingCert(t *testing.T, certPEM, keyPEM, caBundle []byte) {
	t.Helper()
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("tls.crt and tls.key: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatal("caBundle holds no PEM certificate")
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: webhookDNS,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate for %s: %v", webhookDNS, err)
	}
	if !slices.Contains(cert.DNSNames, webhookDNS) {
		t.Errorf("serving certificate names %v, want %s among them", cert.DNSNames, webhookDNS)
	}
}
