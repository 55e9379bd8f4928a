package webhook_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

func readDeploy(t *testing.T, name string) []byte {
	t.Helper()
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "webhook", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestValidatingWebhookConfiguration checks the shipped configuration against the code:
// it matches exactly what the Validator serves, at the Handler's path, and fails closed.
func TestValidatingWebhookConfiguration(t *testing.T) {
	var c admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(readDeploy(t, "validating-webhook.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "sandbox-pool-validating-webhook" {
		t.Errorf("name = %q", c.Name)
	}
	if got := c.Annotations["cert-manager.io/inject-ca-from"]; got != "sandbox-pool-system/sandbox-pool-webhook-cert" {
		t.Errorf("cert-manager.io/inject-ca-from = %q", got)
	}
	if len(c.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(c.Webhooks))
	}
	w := c.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
		t.Error("failurePolicy is not Fail")
	}
	if w.MatchPolicy == nil || *w.MatchPolicy != admissionregistrationv1.Equivalent {
		t.Error("matchPolicy is not Equivalent")
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Error("sideEffects is not None")
	}
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 {
		t.Error("timeoutSeconds is not 5")
	}
	if !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("admissionReviewVersions = %v, want [v1]", w.AdmissionReviewVersions)
	}
	s := w.ClientConfig.Service
	if s == nil || s.Namespace != "sandbox-pool-system" || s.Name != "sandbox-pool-webhook" ||
		s.Port == nil || *s.Port != 443 || s.Path == nil || *s.Path != webhook.ValidatePath {
		t.Errorf("clientConfig.service = %+v, want sandbox-pool-system/sandbox-pool-webhook:443%s", s, webhook.ValidatePath)
	}
	if w.ClientConfig.URL != nil {
		t.Error("clientConfig has a url")
	}
	if len(w.Rules) != 1 {
		t.Fatalf("%d rules, want 1", len(w.Rules))
	}
	r := w.Rules[0]
	want := []string{v1alpha1.ResourceSandboxPoolClasses, v1alpha1.ResourceSandboxPoolClasses + "/status", v1alpha1.ResourceSandboxPools, v1alpha1.ResourceSandboxPools + "/status"}
	if !slices.Equal(r.APIGroups, []string{v1alpha1.GroupName}) || !slices.Equal(r.APIVersions, []string{v1alpha1.Version}) ||
		!slices.Equal(slices.Sorted(slices.Values(r.Resources)), slices.Sorted(slices.Values(want))) {
		t.Errorf("rule matches %v %v %v, want [%s] [%s] %v", r.APIGroups, r.APIVersions, r.Resources, v1alpha1.GroupName, v1alpha1.Version, want)
	}
	if !slices.Equal(r.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
		t.Errorf("operations = %v, want [CREATE UPDATE]", r.Operations)
	}
	for _, v := range append(append(slices.Clone(r.APIGroups), r.Resources...), r.APIVersions...) {
		if strings.Contains(v, "*") {
			t.Errorf("wildcard %q in the rule", v)
		}
	}
}

func TestWebhookRBAC(t *testing.T) {
	for doc := range strings.SplitSeq(string(readDeploy(t, "rbac.yaml")), "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupName},
			Resources: []string{v1alpha1.ResourceSandboxPools},
			Verbs:     []string{"get", "list", "watch"},
		}, {
			APIGroups: []string{nodev1.GroupName},
			Resources: []string{"runtimeclasses"},
			Verbs:     []string{"get", "list", "watch"},
		}}
		if !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
				len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
		}) {
			t.Errorf("ClusterRole rules = %+v, want %+v (the informers' needs only)", role.Rules, want)
		}
		return
	}
	t.Fatal("no ClusterRole in rbac.yaml")
}
