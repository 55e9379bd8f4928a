package admission

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
)

// buildCLI builds the sandboxpool binary users run.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin, err := support.BuildBinary(cp.Root, t.TempDir(), "./cmd/sandboxpool")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestCorpusRefusedOfflineAndLive: every invalid object is refused by the offline check
// users put in their CI (sandboxpool vet: the CUE schema, then the policy) with the corpus's
// message, and by the live API server with the CRDs installed and the webhook in place, as
// its writer would send it (a spec as a create by a cluster admin, a status as the pool's
// node's write of its pool's status), with the corpus's "# apiserver:" message (or, where
// the CRD alone cannot refuse it, the webhook's "# webhook:" message), naming the field the
// CUE schema names or a field that holds it. No invalid object passes either.
func TestCorpusRefusedOfflineAndLive(t *testing.T) {
	requireCluster(t)
	bin := buildCLI(t)
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), o.Name)
			if err := os.WriteFile(file, o.YAML, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "vet", file).Output()
			if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
				t.Fatalf("sandboxpool vet: want exit 1, got %v:\n%s", err, out)
			}
			if o.As == o.Kind && !strings.Contains(string(out), o.Error) {
				t.Errorf("sandboxpool vet does not say %q:\n%s", o.Error, out)
			}

			want := o.APIServer
			if o.APIServerGap != "" {
				want = o.Webhook
			}
			if want == "" {
				t.Fatal(`corpus file has neither "# apiserver:" nor "# apiserver-gap:" with "# webhook:"`)
			}
			msg := writeLive(t, o)
			if msg == "" {
				t.Fatalf("the API server accepted it; want %q", want)
			}
			if !strings.Contains(msg, want) {
				t.Errorf("the API server's answer does not say %q:\n%s", want, msg)
			}
			if field, _, _ := strings.Cut(o.Error, ": "); o.As == o.Kind && !namesField(msg, field) {
				t.Errorf("the API server's answer names neither %s nor a field that holds it:\n%s", field, msg)
			}
		})
	}
}

// writeLive writes o as its writer would and returns the API server's refusal, or "" when
// it was accepted (and is then deleted again).
func writeLive(t *testing.T, o corpus.Object) string {
	t.Helper()
	ctx := context.Background()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(o.JSON, &u.Object); err != nil {
		t.Fatal(err)
	}
	gvr := poolsGVR
	if o.Kind == v1alpha1.KindSandboxPoolClass {
		gvr = classesGVR
	}
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if !o.Status {
		strict.DryRun = []string{metav1.DryRunAll} // admission runs in full on a dry run
		if _, err := admin(t).Resource(gvr).Create(ctx, u, strict); err != nil {
			return err.Error()
		}
		return ""
	}
	status := u.Object["status"]
	delete(u.Object, "status")
	if _, err := admin(t).Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the object without its status: %v", err)
	}
	t.Cleanup(func() { _ = admin(t).Resource(gvr).Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
	node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's role may patch its pool's status (deploy/rbac).
	if _, err := nodeClient(t, node).Resource(gvr).Patch(ctx, u.GetName(), types.MergePatchType, patch,
		metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict}, "status"); err != nil {
		return err.Error()
	}
	return ""
}

// namesField reports whether msg names the field (dotted, list indexes in brackets, as the
// CUE schema and the API server write paths) or one of the fields that hold it: a rule on
// a struct or a map (a CEL rule, a map's keys) names the struct or the map.
func namesField(msg, field string) bool {
	parts := strings.Split(field, ".")
	for n := len(parts); n >= 2; n-- {
		if strings.Contains(msg, strings.Join(parts[:n], ".")) {
			return true
		}
	}
	return len(parts) == 1 && strings.Contains(msg, field)
}
