package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// fakeAPIServer serves just enough of the Kubernetes API for the webhook's informers:
// discovery, a list with pools and one with the placeholder RuntimeClass, and watches that
// stay open and quiet. It refuses streaming lists, so the reflectors fall back to
// list-then-watch.
func fakeAPIServer(t *testing.T, pools ...v1alpha1.SandboxPool) *httptest.Server {
	t.Helper()
	return gatedAPIServer(t, nil, pools...)
}

// gatedAPIServer is fakeAPIServer whose list of pools answers only once release is closed
// (nil: at once).
func gatedAPIServer(t *testing.T, release <-chan struct{}, pools ...v1alpha1.SandboxPool) *httptest.Server {
	t.Helper()
	gv := v1alpha1.GroupName + "/" + v1alpha1.Version
	nodeGV := nodev1.SchemeGroupVersion.String()
	stop := make(chan struct{})
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	verbs := metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}
	mux := http.NewServeMux()
	mux.HandleFunc("/api", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, _ *http.Request) {
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v1alpha1.Version}
		nv := metav1.GroupVersionForDiscovery{GroupVersion: nodeGV, Version: nodev1.SchemeGroupVersion.Version}
		writeJSON(w, http.StatusOK, metav1.APIGroupList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{
				{Name: v1alpha1.GroupName, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v},
				{Name: nodev1.GroupName, Versions: []metav1.GroupVersionForDiscovery{nv}, PreferredVersion: nv},
			},
		})
	})
	mux.HandleFunc("/apis/"+gv, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: gv,
			APIResources: []metav1.APIResource{
				{Name: v1alpha1.ResourceSandboxPools, Kind: v1alpha1.KindSandboxPool, Verbs: verbs},
				{Name: v1alpha1.ResourceSandboxPoolClasses, Kind: v1alpha1.KindSandboxPoolClass, Verbs: verbs},
			},
		})
	})
	mux.HandleFunc("/apis/"+nodeGV, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: nodeGV,
			APIResources: []metav1.APIResource{{Name: "runtimeclasses", Kind: "RuntimeClass", Verbs: verbs}},
		})
	})
	listWatch := func(gate <-chan struct{}, list func() any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			switch {
			case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
				writeJSON(w, http.StatusBadRequest, metav1.Status{
					TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
					Status:   metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
					Message: "streaming lists are not served here",
				})
			case q.Get("watch") == "true":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-stop:
				}
			default:
				if gate != nil {
					select {
					case <-gate:
					case <-r.Context().Done():
						return
					}
				}
				writeJSON(w, http.StatusOK, list())
			}
		}
	}
	mux.HandleFunc("/apis/"+gv+"/"+v1alpha1.ResourceSandboxPools, listWatch(release, func() any {
		return v1alpha1.SandboxPoolList{
			TypeMeta: metav1.TypeMeta{Kind: "SandboxPoolList", APIVersion: gv},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"},
			Items:    pools,
		}
	}))
	mux.HandleFunc("/apis/"+nodeGV+"/runtimeclasses", listWatch(nil, func() any {
		return nodev1.RuntimeClassList{
			TypeMeta: metav1.TypeMeta{Kind: "RuntimeClassList", APIVersion: nodeGV},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"},
			Items: []nodev1.RuntimeClass{{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultRuntimeClassName, ResourceVersion: "3"},
				Handler: v1alpha1.PlaceholderRuntimeHandler}},
		}
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	return srv
}

// TestRun runs the whole webhook against a fake API server: it is live at once, turns
// ready only once the inventory has listed the pools, decides with that inventory over
// TLS, exports its metrics and stops cleanly.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	existing := *wrappers.MakePool("node-a").Class("default").ResourceVersion("5").Obj()
	listed := make(chan struct{})
	api := gatedAPIServer(t, listed, existing)
	certDir := t.TempDir()
	newTestCert(t, "webhook").install(t, certDir)
	opts := DefaultOptions()
	opts.Addr, opts.HealthAddr, opts.MetricsAddr, opts.CertDir = support.FreeAddr(t), support.FreeAddr(t), support.FreeAddr(t), certDir
	opts.ShutdownDelay = 2 * time.Second

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, &rest.Config{Host: api.URL}, opts, logr.Discard()) }()

	get := func(url string) (int, string) {
		resp, err := http.Get(url) //nolint:noctx // bounded by the poll's deadline
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Live, serving TLS, and not ready while the pool list has not come.
	var lastReady string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get("http://" + opts.HealthAddr + HealthzPath)
		_, tlsErr := servedCert(ctx, opts.Addr, 0)
		var readyCode int
		readyCode, lastReady = get("http://" + opts.HealthAddr + ReadyzPath)
		return code == http.StatusOK && tlsErr == nil && readyCode != 0, nil
	})
	if err != nil {
		stop()
		t.Fatalf("never live: %s (Run: %v)", lastReady, receive(done))
	}
	if code, body := get("http://" + opts.HealthAddr + ReadyzPath); code == http.StatusOK || !strings.Contains(body, "[-]inventory failed") {
		t.Errorf("readyz before the pool list = %d %q, want a failure naming the inventory", code, body)
	}
	close(listed)
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var code int
		code, lastReady = get("http://" + opts.HealthAddr + ReadyzPath)
		return code == http.StatusOK, nil
	})
	if err != nil {
		stop()
		t.Fatalf("never ready: %s (Run: %v)", lastReady, receive(done))
	}

	// A pool of another class for node-a is denied: the inventory came from the list.
	gpu := existing.DeepCopy()
	gpu.Spec.ClassRef.Name = "gpu"
	gpu.Labels = map[string]string{v1alpha1.LabelClass: "gpu", v1alpha1.LabelNode: "node-a"}
	gpu.Spec.ResourcePolicy.Resources = nil
	raw, err := json.Marshal(gpu)
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), `"resourcePolicy":{"resources":null}`, `"resourcePolicy":{"resources":{"cpu":"4","memory":"8Gi"}}`, 1))
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: reviewKind},
		Request: &admissionv1.AdmissionRequest{
			UID:       "run-test",
			Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: v1alpha1.KindSandboxPool},
			Resource:  metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools},
			Name:      gpu.Name,
			Operation: admissionv1.Create,
			UserInfo:  authenticationv1.UserInfo{Username: policy.DefaultControllerUsername},
			Object:    runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
	// review posts the review; closed is whether the webhook asked to close the connection.
	review := func() (resp *admissionv1.AdmissionResponse, closed bool) {
		t.Helper()
		r, err := client.Post("https://"+opts.Addr+ValidatePath, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var rv admissionv1.AdmissionReview
		err = json.NewDecoder(r.Body).Decode(&rv)
		r.Body.Close()
		client.CloseIdleConnections()
		if err != nil || rv.Response == nil {
			t.Fatalf("decoding the review: %v", err)
		}
		return rv.Response, r.Close
	}
	denied := func(r *admissionv1.AdmissionResponse) bool {
		return !r.Allowed && r.Result != nil && r.Result.Code == http.StatusForbidden &&
			strings.Contains(r.Result.Message, "already belongs to class default")
	}
	r, closed := review()
	if !denied(r) {
		t.Errorf("response %+v, want a 403 naming class default", r)
	}
	if closed {
		t.Error("a serving webhook closes its connections")
	}

	if code, metrics := get("http://" + opts.MetricsAddr + MetricsPath); code != http.StatusOK ||
		!strings.Contains(metrics, MetricDecisions+`{kind="SandboxPool",operation="CREATE",result="denied",subresource=""} 1`) ||
		!strings.Contains(metrics, MetricDecisionDuration+"_bucket") ||
		!strings.Contains(metrics, "certwatcher_read_certificate_total") || !strings.Contains(metrics, "go_goroutines") {
		t.Errorf("metrics = %d:\n%s", code, grepLines(metrics, "sandboxpool_webhook"))
	}

	// Stopped: for ShutdownDelay it still decides, closing each connection after its
	// answer, and is not ready; then it returns.
	stop()
	stopped := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, opts.ShutdownDelay, true, func(context.Context) (bool, error) {
		var code int
		code, lastReady = get("http://" + opts.HealthAddr + ReadyzPath)
		return code >= http.StatusBadRequest && strings.Contains(lastReady, "[-]shutting-down failed"), nil
	})
	if err != nil {
		t.Errorf("readyz while stopping = %q, want a failure naming shutting-down", lastReady)
	}
	r, closed = review()
	if !denied(r) || !closed {
		t.Errorf("while stopping: response %+v, connection closed %v; want the same decision and Connection: close", r, closed)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
		if waited := time.Since(stopped); waited < opts.ShutdownDelay {
			t.Errorf("Run returned %s after cancel, before the shutdown delay %s", waited, opts.ShutdownDelay)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after cancel")
	}
	if _, err := net.DialTimeout("tcp", opts.Addr, time.Second); err == nil {
		t.Error("the webhook still listens after Run returned")
	}
}

func receive(c <-chan error) error {
	select {
	case err := <-c:
		return err
	default:
		return nil
	}
}

func grepLines(s, substr string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
