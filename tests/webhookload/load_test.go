// Package webhookload measures the admission webhook's throughput with the load generator
// in another process than the webhook, so that each one's CPU is read on its own: the test
// binary runs itself again as the webhook (the real Handler, Validator and Rego engine
// behind TLS on loopback) and sends it reviews at fixed rates.
package webhookload

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
	"github.com/agentcube/sandboxpool/webhook"
)

// serveEnv, when set to a directory holding cert.pem and key.pem, makes the test binary
// serve the webhook instead of running tests: it prints its address on stdout and serves
// until stdin closes. profileEnv names a file for the webhook process's CPU profile.
const (
	serveEnv   = "SANDBOXPOOL_WEBHOOKLOAD_SERVE"
	profileEnv = "SANDBOXPOOL_WEBHOOKLOAD_CPUPROFILE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(serveEnv); dir != "" {
		if err := serve(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serve runs the webhook's Handler behind TLS on a loopback port, with an inventory of
// 1,000 pools, until stdin closes.
func serve(dir string) error {
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	pools := make(map[string]policy.PoolRef, 1000)
	for i := range 1000 {
		node := fmt.Sprintf("node-%05d", i)
		pools["placeholder-"+node] = policy.PoolRef{Class: "default", NodeName: node}
	}
	engine, err := policy.New(context.Background(), policy.WithInventory(pools))
	if err != nil {
		return err
	}
	h, err := webhook.NewHandler(webhook.NewValidator(engine), prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.ValidatePath, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return srv.Close()
}

// certificate writes a self-signed serving certificate for 127.0.0.1 into dir and returns
// a pool that trusts it.
func certificate(b *testing.B, dir string) *x509.CertPool {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhookload"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

// statusWrites returns a function that makes the body of a new review of the agent's
// common status write (policytest.StatusWrite) with a figure no earlier one had, so no
// result comes from the webhook's caches but what a real stream of writes would reuse.
func statusWrites(b *testing.B) func() []byte {
	old, obj := policytest.StatusWrite(b)
	const figure = `"allocatedMemoryBytes": 1073741824`
	if !bytes.Contains(obj, []byte(figure)) {
		b.Fatal("the status write has no figure to change")
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         "705ab4f5-6393-11e8-b7cc-42010a800002",
			Kind:        metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: v1alpha1.KindSandboxPool},
			Resource:    metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools},
			SubResource: "status",
			Name:        "placeholder-" + policytest.StatusWriteNode,
			Operation:   admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{Username: "system:node:" + policytest.StatusWriteNode,
				Groups: []string{user.NodesGroup, user.AllAuthenticated}},
			Object:    runtime.RawExtension{Raw: obj},
			OldObject: runtime.RawExtension{Raw: old},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	compact := []byte(`"allocatedMemoryBytes":1073741824`) // json.Marshal compacts the objects
	before, after, found := bytes.Cut(body, compact)
	if !found {
		b.Fatal("the review has no figure to change")
	}
	var n atomic.Int64
	return func() []byte {
		out := make([]byte, 0, len(body)+16)
		out = append(out, before...)
		out = append(out, `"allocatedMemoryBytes":`...)
		out = strconv.AppendInt(out, 2_000_000_000+n.Add(1), 10)
		return append(out, after...)
	}
}

// rates are the request rates BenchmarkWebhookThroughput offers, one window each.
var rates = []int{250, 500, 1000, 1500, 2000, 3000, 4000}

// window is how long each rate is offered.
const window = 3 * time.Second

// p99Limit is the latency within which a rate counts as served.
const p99Limit = 5 * time.Millisecond

// saturatedP99 is the latency past which the webhook no longer keeps up with a rate (its
// backlog grows for the whole window); higher rates would only time out.
const saturatedP99 = time.Second

// BenchmarkWebhookThroughput offers the webhook (another process: this binary serving the
// Handler, see TestMain) the agent's common status write at fixed rates, an open loop
// (each request is sent at its time whether or not earlier ones returned, on up to 64
// kept-alive connections), for a few seconds each, and times each request from the moment
// it was due, so queueing shows. For each rate it reports the rate achieved, p50 and p99,
// the webhook's CPU (cores, and µs per decision) and the load generator's (this process),
// and logs the highest rate whose p99 stayed within 5 ms. Requests that time out are
// counted (timed-out), and once a rate's p99 passes saturatedP99 the higher rates are not
// offered. Both processes share the
// machine's cores; the CPU per decision says what the webhook alone would serve on them.
//
//	go test -run '^$' -bench WebhookThroughput -benchtime 1x ./tests/webhookload/
func BenchmarkWebhookThroughput(b *testing.B) {
	dir := b.TempDir()
	roots := certificate(b, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the webhook process did not start: %v", err)
	}
	url := "https://" + strings.TrimSpace(addr) + webhook.ValidatePath

	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	next := statusWrites(b)
	send := func(body []byte) error {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"allowed":true`)) {
			return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, out)
		}
		return nil
	}
	for range 200 { // warm the connections, the engine and the caches of what repeats
		if err := send(next()); err != nil {
			b.Fatal(err)
		}
	}

	served, saturated := 0.0, false
	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate-%d", rate), func(b *testing.B) {
			n := rate * int(window/time.Second)
			latencies := make([]time.Duration, n)
			var failed, timedOut atomic.Int64
			var wg sync.WaitGroup
			hookBefore, err := framework.ProcUsage(cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			ownBefore := cpu(b)
			b.ResetTimer()
			start := time.Now()
			sent := 0
			for sent < n {
				due := min(n, int(time.Since(start).Seconds()*float64(rate))+1)
				for ; sent < due; sent++ {
					i := sent
					at := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
					wg.Go(func() {
						if err := send(next()); err != nil {
							failed.Add(1)
							// A saturated webhook times out: that is a figure of the rate,
							// any other failure (a denial, an HTTP error) is a broken run.
							if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
								timedOut.Add(1)
							} else if failed.Load()-timedOut.Load() == 1 {
								b.Error(err)
							}
						}
						latencies[i] = time.Since(at)
					})
				}
				time.Sleep(200 * time.Microsecond) // pacing the open loop, not synchronisation
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			hookAfter, err := framework.ProcUsage(cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			own := cpu(b) - ownBefore
			slices.Sort(latencies)
			p99 := latencies[(len(latencies)-1)*99/100]
			achieved := float64(n-int(failed.Load())) / elapsed.Seconds()
			hookCPU := hookAfter.CPU - hookBefore.CPU
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(achieved, "req/s")
			b.ReportMetric(float64(latencies[(len(latencies)-1)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			b.ReportMetric(hookCPU.Seconds()/hookAfter.At.Sub(hookBefore.At).Seconds(), "webhook-cores")
			b.ReportMetric(float64(hookCPU.Microseconds())/float64(n), "webhook-cpu-µs/op")
			b.ReportMetric(float64(own.Microseconds())/float64(n), "loadgen-cpu-µs/op")
			b.ReportMetric(float64(timedOut.Load()), "timed-out")
			if p99 <= p99Limit && failed.Load() == 0 {
				served = max(served, achieved)
			}
			saturated = p99 > saturatedP99
		})
		if saturated {
			b.Logf("rate %d/s left a backlog (p99 above %v): the higher rates are not offered", rate, saturatedP99)
			break
		}
	}
	b.Logf("FIGURE webhook throughput: %.0f decisions/s served with p99 <= %v (the highest rate offered that kept it)", served, p99Limit)
}

// cpu is this process's CPU time (user and system) so far.
func cpu(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
