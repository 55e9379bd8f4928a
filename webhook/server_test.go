package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// certwatcher logs through controller-runtime's logger.
	ctrllog.SetLogger(logr.Discard())
}

// testCert is a self-signed serving certificate for 127.0.0.1, PEM encoded.
type testCert struct {
	certPEM, keyPEM []byte
	der             []byte
}

func newTestCert(t *testing.T, cn string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		der:     der,
	}
}

// install writes c into dir the way a Secret volume update lands: each file replaced
// whole by a rename, never seen half-written.
func (c testCert) install(t *testing.T, dir string) {
	t.Helper()
	for name, b := range map[string][]byte{KeyFile: c.keyPEM, CertFile: c.certPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// servedCert is the leaf certificate a TLS client sees at addr, or an error.
func servedCert(ctx context.Context, addr string, maxVersion uint16) ([]byte, error) {
	// The client offers everything from TLS 1.0 up to maxVersion (0: the newest), so that
	// only the server's minimum decides.
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: maxVersion}} //nolint:gosec // the test compares the raw certificate
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, nil
}

// TestServeWebhookCertificateReload starts the webhook's TLS listener before its
// certificate exists, then installs certificate A and rotates to B: the server picks
// each up without a restart.
func TestServeWebhookCertificateReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	certs := &certificates{dir: dir}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- serveWebhook(serveCtx, ln, certs, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("reviewed"))
		}), logr.Discard())
	}()

	if certs.loaded() {
		t.Fatal("certificate loaded before it was written")
	}
	waitForCert := func(c testCert, name string) {
		t.Helper()
		var last error
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			dialCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			got, err := servedCert(dialCtx, addr, 0)
			last = err
			return err == nil && bytes.Equal(got, c.der), nil
		})
		if err != nil {
			t.Fatalf("certificate %s never served (last dial error: %v)", name, last)
		}
	}

	a, b := newTestCert(t, "cert-a"), newTestCert(t, "cert-b")
	a.install(t, dir)
	waitForCert(a, "A")
	if !certs.loaded() {
		t.Error("certificate served but not reported loaded")
	}

	// The admission handler is served at ValidatePath.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
	resp, err := client.Post("https://"+addr+ValidatePath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST %s = %d, want 200", ValidatePath, resp.StatusCode)
	}
	client.CloseIdleConnections()

	// TLS 1.1 is refused, TLS 1.2 accepted.
	if _, err := servedCert(ctx, addr, tls.VersionTLS11); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 handshake: %v, want the server's protocol version alert", err)
	}
	if _, err := servedCert(ctx, addr, tls.VersionTLS12); err != nil {
		t.Errorf("TLS 1.2 handshake: %v", err)
	}

	b.install(t, dir)
	waitForCert(b, "B")

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveWebhook returned %v after cancel, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("serveWebhook did not stop after cancel")
	}
}

func TestHealthMux(t *testing.T) {
	for _, tt := range []struct {
		cert, synced, stopping bool
		want                   int
		body                   string
	}{
		{false, false, false, http.StatusServiceUnavailable, "serving certificate not loaded; pool inventory not synced"},
		{true, false, false, http.StatusServiceUnavailable, "pool inventory not synced"},
		{false, true, false, http.StatusServiceUnavailable, "serving certificate not loaded"},
		{true, true, true, http.StatusServiceUnavailable, "shutting down"},
		{true, true, false, http.StatusOK, "ok"},
	} {
		mux := healthMux(func() bool { return tt.cert }, func() bool { return tt.synced }, func() bool { return tt.stopping })
		for path, want := range map[string]int{HealthzPath: http.StatusOK, ReadyzPath: tt.want} {
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			if w.Code != want {
				t.Errorf("cert=%v synced=%v: GET %s = %d, want %d", tt.cert, tt.synced, path, w.Code, want)
			}
			if path == ReadyzPath && !strings.Contains(w.Body.String(), tt.body) {
				t.Errorf("cert=%v synced=%v: GET %s body %q, want %q", tt.cert, tt.synced, path, w.Body.String(), tt.body)
			}
		}
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	for name, o := range map[string]Options{
		"missing bundle":         {PolicyBundle: filepath.Join(t.TempDir(), "nope"), ControllerUsernames: []string{"c"}},
		"no controller identity": {},
		"half a node SA config":  {ControllerUsernames: []string{"c"}, NodeSAPrefix: "agent-"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := Run(ctx, cfg, o, logr.Discard()); err == nil {
				t.Error("Run returned no error")
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Addr != DefaultAddr || o.MetricsAddr != DefaultMetricsAddr || o.HealthAddr != DefaultHealthAddr || o.CertDir != DefaultCertDir {
		t.Errorf("withDefaults = %+v", o)
	}
	if err := DefaultOptions().policyConfig().Validate(); err != nil {
		t.Errorf("default policy config: %v", err)
	}
}
