package leasetoken

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// jwt is an unsigned token with a service account's claims, bound to node ("" for none),
// issued at iat and valid for life.
func jwt(t *testing.T, node string, iat time.Time, life time.Duration) string {
	t.Helper()
	k8s := map[string]any{"namespace": "sandbox-pool-node-lease", "serviceaccount": map[string]any{"name": "placeholder-agent-node-a", "uid": "sa-uid"}}
	if node != "" {
		k8s["node"] = map[string]any{"name": node, "uid": "node-uid"}
	}
	b, err := json.Marshal(map[string]any{"iat": iat.Unix(), "exp": iat.Add(life).Unix(), "kubernetes.io": k8s})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(b) + "." + enc([]byte("signature"))
}

// keeper is a Keeper of node-a for the token in a file, on a fake clock, whose requests go
// to a fake clientset that issues next.
func keeper(t *testing.T, first string, next func() string) (*Keeper, *rest.Config, *fake.Clientset, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, k, err := New(&rest.Config{Host: "https://127.0.0.1:1", BearerTokenFile: path}, "node-a", time.Hour, clocktesting.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tr.Status.Token = next()
		return true, tr, nil
	})
	k.requests = cs
	return k, cfg, cs, path
}

func TestDue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		token   string
		now     time.Time
		wantDue bool
		wantIn  time.Duration
	}{
		{"bound to nothing: at once", jwt(t, "", t0, time.Hour), t0, true, 0},
		{"bound to another node: at once", jwt(t, "node-b", t0, time.Hour), t0, true, 0},
		{"fresh and bound to node-a", jwt(t, "node-a", t0, time.Hour), t0, false, 48 * time.Minute},
		{"a second before 80 %", jwt(t, "node-a", t0, time.Hour), t0.Add(48*time.Minute - time.Second), false, time.Second},
		{"at 80 %", jwt(t, "node-a", t0, time.Hour), t0.Add(48 * time.Minute), true, 0},
		{"expired", jwt(t, "node-a", t0, time.Hour), t0.Add(2 * time.Hour), true, 0},
	} {
		k, _, _, _ := keeper(t, tc.token, nil)
		if due, in := k.Due(tc.now); due != tc.wantDue || in != tc.wantIn {
			t.Errorf("%s: due %v in %s, want %v %s", tc.name, due, in, tc.wantDue, tc.wantIn)
		}
	}
}

// TestRefresh: the Keeper asks for its own service account's token bound to its Node for
// its lifetime, hands the new token to its clients at once and writes it to the token file.
func TestRefresh(t *testing.T) {
	next := jwt(t, "node-a", t0.Add(time.Minute), time.Hour)
	k, cfg, cs, path := keeper(t, jwt(t, "", t0, 10*time.Minute), func() string { return next })
	if err := k.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	acts := cs.Actions()
	if len(acts) != 1 || acts[0].GetSubresource() != "token" || acts[0].GetNamespace() != "sandbox-pool-node-lease" {
		t.Fatalf("requests %+v, want one token request in the Lease namespace", acts)
	}
	ca := acts[0].(k8stesting.CreateActionImpl)
	tr := ca.GetObject().(*authenticationv1.TokenRequest)
	if ca.Name != "placeholder-agent-node-a" || tr.Spec.BoundObjectRef == nil || tr.Spec.BoundObjectRef.Kind != "Node" ||
		tr.Spec.BoundObjectRef.Name != "node-a" || tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 {
		t.Errorf("requested %s: %+v, want placeholder-agent-node-a's token bound to Node node-a for 3600 s", ca.Name, tr.Spec)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != next {
		t.Errorf("token file: %q, %v; want the new token", b, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if due, in := k.Due(t0.Add(time.Minute)); due || in != 48*time.Minute {
		t.Errorf("after the refresh: due %v in %s, want 48m", due, in)
	}
	// The clients send the Keeper's current token.
	var got string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	c := rest.CopyConfig(cfg)
	c.Host, c.Insecure = srv.URL, true
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(srv.URL + "/api")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got != "Bearer "+next {
		t.Errorf("Authorization %q, want the refreshed token", strings.TrimPrefix(got, "Bearer "))
	}
}

// TestAdoptsNewerFile: a token an operator writes to the file (issued later) replaces the
// one the Keeper holds; an older one does not.
func TestAdoptsNewerFile(t *testing.T) {
	k, _, _, path := keeper(t, jwt(t, "node-a", t0, time.Hour), nil)
	older, newer := jwt(t, "node-a", t0.Add(-time.Hour), time.Hour), jwt(t, "node-a", t0.Add(time.Minute), time.Hour)
	for _, tc := range []struct{ file, want string }{{older, k.current.raw}, {newer, newer}} {
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		k.adoptFile(context.Background())
		if tok, _ := k.Token(); tok.AccessToken != tc.want {
			t.Errorf("after writing a token issued at %v: holds another than expected", tc.file == newer)
		}
	}
}

func TestNewChecks(t *testing.T) {
	c := &rest.Config{Host: "https://x", TLSClientConfig: rest.TLSClientConfig{CertFile: "c"}}
	if out, k, err := New(c, "node-a", time.Hour, clocktesting.NewFakeClock(t0)); err != nil || k != nil || out != c {
		t.Errorf("no tokenFile: %v %v %v, want the config as it is and no Keeper", out, k, err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("not-a-jwt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(&rest.Config{BearerTokenFile: path}, "node-a", time.Hour, clocktesting.NewFakeClock(t0)); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a token file that is no JWT: %v, want an error naming the file", err)
	}
	if _, _, err := New(&rest.Config{BearerTokenFile: path}, "node-a", 48*time.Hour, clocktesting.NewFakeClock(t0)); err == nil || !strings.Contains(err.Error(), "--lease-token-expiration") {
		t.Errorf("48h: %v, want an error naming --lease-token-expiration", err)
	}
}

// TestRunExchangesOnceTheNodeExists: Run retries the exchange of a token bound to nothing
// every exchangeRetry while the API server refuses it (its Node has not registered), and
// holds the bound token once it is issued; then it waits for 80 % of that token's life.
func TestRunExchangesOnceTheNodeExists(t *testing.T) {
	bound := jwt(t, "node-a", t0, time.Hour)
	calls := 0
	k, _, cs, _ := keeper(t, jwt(t, "", t0, 10*time.Minute), func() string { return bound })
	cs.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= 2 {
			return true, nil, errors.New(`nodes "node-a" not found`)
		}
		return false, nil, nil
	})
	clk := k.clock.(*clocktesting.FakeClock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	for want := 1; want <= 3; want++ {
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatalf("Run never waited after attempt %d", want)
		}
		if tok, _ := k.Token(); want < 3 && tok.AccessToken == bound {
			t.Fatalf("bound after %d refused attempts", want)
		}
		if want < 3 {
			clk.Step(exchangeRetry)
		}
	}
	if tok, _ := k.Token(); tok.AccessToken != bound || calls != 3 {
		t.Errorf("after three attempts (%d made): holds the bound token %v", calls, tok.AccessToken == bound)
	}
	if due, in := k.Due(clk.Now()); due || in <= exchangeRetry {
		t.Errorf("the bound token is due %v in %s, want 80 %% of its hour", due, in)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
