package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

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

// review sends one AdmissionReview to the live webhook server, over the same TLS the API
// server uses.
func review(t *testing.T, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	wo := cp.WebhookOptions()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(wo.LocalServingCAData) {
		t.Fatal("no CA data for the webhook")
	}
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)) + "/validate"
	resp, err := httpClient.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decoding the review (HTTP %d): %v", resp.StatusCode, err)
	}
	if out.Response == nil || out.Response.UID != req.UID {
		t.Fatalf("response missing or with another UID: %+v", out.Response)
	}
	return out.Response
}

// TestCorpusSameMessagesFromVetAndLiveWebhook: the offline check users put in their CI and
// the live webhook reject every invalid object with the same messages.
func TestCorpusSameMessagesFromVetAndLiveWebhook(t *testing.T) {
	requireCluster(t)
	bin := buildCLI(t)
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			if o.As != o.Kind {
				t.Skipf("checked as %s, declared %s: both layers see the declared kind", o.As, o.Kind)
			}
			file := filepath.Join(t.TempDir(), o.Name)
			if err := os.WriteFile(file, o.YAML, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "vet", file).Output()
			if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
				t.Fatalf("sandboxpool vet: want exit 1, got %v:\n%s", err, out)
			}
			resource := v1alpha1.ResourceSandboxPools
			if o.Kind == v1alpha1.KindSandboxPoolClass {
				resource = v1alpha1.ResourceSandboxPoolClasses
			}
			resp := review(t, &admissionv1.AdmissionRequest{
				UID:       "corpus-" + uidFor(o.Name),
				Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: o.Kind},
				Resource:  metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: resource},
				Operation: admissionv1.Create,
				UserInfo:  authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}},
				Object:    runtime.RawExtension{Raw: o.JSON},
			})
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("live webhook allowed it: %+v", resp)
			}
			if !strings.Contains(resp.Result.Message, o.Error) || !strings.Contains(string(out), o.Error) {
				t.Errorf("want %q from both;\nvet:     %s\nwebhook: %s", o.Error, out, resp.Result.Message)
			}
			// Every violation vet prints is in the webhook's answer.
			for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
				parts := strings.SplitN(line, ": ", 3)
				if len(parts) == 3 && !strings.Contains(resp.Result.Message, parts[2]) {
					t.Errorf("vet says %q, the webhook does not:\n%s", parts[2], resp.Result.Message)
				}
			}
		})
	}
}

func uidFor(name string) k8stypes.UID { return k8stypes.UID(strings.TrimSuffix(name, ".yaml")) }
