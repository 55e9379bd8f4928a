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
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentcube/sandboxpool/tests/support"
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

// run is a webhook started by startRun: err is Run's result once done is closed.
type run struct {
	opts Options
	done chan struct{}
	err  error
}

// startRun runs the webhook against a fake API server with the certificate in certDir;
// it is stopped when t ends.
func startRun(t *testing.T, certDir string) *run {
	t.Helper()
	api := fakeAPIServer(t)
	r := &run{opts: DefaultOptions(), done: make(chan struct{})}
	r.opts.Addr, r.opts.HealthAddr, r.opts.MetricsAddr, r.opts.CertDir = support.FreeAddr(t), support.FreeAddr(t), support.FreeAddr(t), certDir
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		r.err = Run(ctx, &rest.Config{Host: api.URL}, r.opts, logr.Discard())
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("Run did not return after cancel")
		}
	})
	return r
}

// TestCertificateReload: the webhook serves certificate A from the cert dir, then B once
// the Secret rotates, without a restart; TLS below 1.2 and HTTP/2 are refused.
func TestCertificateReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	a, b := newTestCert(t, "cert-a"), newTestCert(t, "cert-b")
	a.install(t, dir)
	r := startRun(t, dir)
	opts := r.opts

	waitForCert := func(c testCert, name string) {
		t.Helper()
		var last error
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			select {
			case <-r.done:
				return false, fmt.Errorf("Run returned %w", r.err)
			default:
			}
			dialCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			got, err := servedCert(dialCtx, opts.Addr, 0)
			last = err
			return err == nil && bytes.Equal(got, c.der), nil
		})
		if err != nil {
			t.Fatalf("certificate %s never served: %v (last dial error: %v)", name, err, last)
		}
	}
	waitForCert(a, "A")

	// TLS 1.1 is refused, TLS 1.2 accepted.
	if _, err := servedCert(ctx, opts.Addr, tls.VersionTLS11); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.1 handshake: %v, want the server's protocol version alert", err)
	}
	if _, err := servedCert(ctx, opts.Addr, tls.VersionTLS12); err != nil {
		t.Errorf("TLS 1.2 handshake: %v", err)
	}
	// A client that offers HTTP/2 first gets HTTP/1.1.
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}} //nolint:gosec // the test reads the negotiated protocol
	conn, err := d.DialContext(ctx, "tcp", opts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("negotiated protocol %q, want http/1.1", p)
	}
	conn.Close()

	b.install(t, dir)
	waitForCert(b, "B")
}

// TestRunWithoutCertificate: a cert dir without the certificate stops the webhook with an
// error that names the file.
func TestRunWithoutCertificate(t *testing.T) {
	r := startRun(t, t.TempDir())
	select {
	case <-r.done:
		if r.err == nil || !strings.Contains(r.err.Error(), CertFile) {
			t.Errorf("Run returned %v, want an error naming %s", r.err, CertFile)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still runs without a certificate")
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	// Nothing listens at cfg: options Run accepted would fail later, on the API server, so
	// each case must fail with its own reason, and good options with none of them.
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		o    Options
		says string
	}{
		"missing bundle":          {Options{PolicyBundle: filepath.Join(t.TempDir(), "nope"), ControllerUsernames: []string{"c"}}, "loading bundle"},
		"no controller identity":  {Options{}, "no controller identity"},
		"controller and operator": {Options{ControllerUsernames: []string{"c"}, OperatorUsernames: []string{"c"}}, "c is both the controller and an operator"},
		"address without a port":  {Options{Addr: "127.0.0.1", ControllerUsernames: []string{"c"}}, `--addr "127.0.0.1": address 127.0.0.1: missing port`},
		"port zero":               {Options{Addr: ":0", ControllerUsernames: []string{"c"}}, `--addr ":0": the port must be a number from 1 to 65535`},
		"negative shutdown delay": {Options{ShutdownDelay: -time.Second, ControllerUsernames: []string{"c"}}, "--shutdown-delay -1s: must not be negative"},
		"good options":            {Options{ControllerUsernames: []string{"c"}}, "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := Run(ctx, cfg, tc.o, logr.Discard()); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run = %v, want an error saying %q", err, tc.says)
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
