package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentcube/sandboxpool/hack/images/oci"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
	"github.com/agentcube/sandboxpool/tests/wrappers"
)

// The cluster half's own disruptions, with failurePolicy Fail: a leader's Pod deleted, both
// Deployments rolled to another image, the webhook's certificate rotated — each while a
// node writes its pool's status every 100 ms (statusWriter), and none may cost a node an
// admission, lose a write or take a pool out of Ready.

// ImagesBEnv names the directory of a second build of the images, the same code stamped
// with another version (`make images VERSION=… IMAGES_DIR=…`; make test sets it). Unset,
// the test builds them.
const ImagesBEnv = "SANDBOXPOOL_IMAGES_B"

// TestControllerLeaderPodDeleted: of the two controller replicas the leader's Pod is
// deleted (kubectl delete pod: SIGTERM, the leader releases its Lease); the other replica
// leads, and the writes made meanwhile — a class change the controller must carry to its
// pools, a node's status writes every 100 ms — all land: none fails, none is lost, no pool
// leaves Ready.
func TestControllerLeaderPodDeleted(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	t.Cleanup(func() {
		waitRolledOut(t, stack.ControllerDeployment, 2*time.Minute)
		setClassAnnotation(t, "e2e.sandbox-pool.io/failover", "")
		ensureClass(t)
	})
	pods, err := s.ClusterPods(ctx, stack.ControllerDeployment)
	if err != nil || len(pods) != 2 {
		t.Fatalf("controller pods: %d (%v), want the Deployment's 2", len(pods), err)
	}
	leader, err := s.LiveLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var standby string
	for _, p := range pods {
		if p.Name != leader {
			standby = p.Name
		}
	}
	writer := startStatusWriter(t)
	base := wrappers.Resources(baseCPU, baseMemory)
	w := watchLock(t, base, base)
	t0 := time.Now()
	if err := kube.CoreV1().Pods(v1alpha1.DefaultSystemNamespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A write only the controller carries to the pools, made while it changes hands.
	setClassAnnotation(t, "e2e.sandbox-pool.io/failover", t0.Format("150405.000"))
	var newLeader string
	took := eventually(t, "another replica leads", time.Minute, func() (bool, string) {
		l, err := s.LiveLeader(ctx)
		newLeader = l
		return err == nil && l != leader, fmt.Sprintf("leader %q (%v)", l, err)
	})
	eventually(t, "the class change carried to the pool and its placeholder pod", time.Minute, func() (bool, string) {
		pods := mirrorPods(t)
		want := t0.Format("150405.000")
		return len(pods) == 1 && pods[0].Annotations["e2e.sandbox-pool.io/failover"] == want && podReady(&pods[0]),
			fmt.Sprintf("%d mirror pods", len(pods))
	})
	waitSynced(t, baseCPU, baseMemory, time.Minute)
	waitRolledOut(t, stack.ControllerDeployment, 2*time.Minute)
	r := writer.result()
	t1 := time.Now()
	t.Logf("FIGURE controller leader's Pod deleted → %s leads after %s (the standby was %s); class change reached the placeholder pod %s after the delete",
		newLeader, took.Round(time.Millisecond), standby, time.Since(t0).Round(time.Millisecond))
	r.check(t, "leader's Pod deleted")
	n, by, cancelled := admissionErrors(t, t0, t1)
	t.Logf("FIGURE controller leader's Pod deleted: %d failed admissions (audit log, all identities; %d requests cancelled by the stopping leader), %d status writes by nodes; %s",
		n, cancelled, nodeWrites(t, t0, t1), r)
	if n > 0 {
		t.Errorf("failed admissions while the controller changed hands: %v", by)
	}
	lock := w.check("controller leader's Pod deleted")
	if v := lock.view(viewReady); v.bad > 0 {
		t.Errorf("the pool left Ready while the controller changed hands: %d samples, longest %s", v.bad, v.gap)
	}
}

// TestRollingUpdate rolls both Deployments to image B — the same code built with another
// version string — the way docs/operator-guide.md upgrades ("Upgrade": apply the install
// with the new tags): the webhook surges a new replica before it removes one, the
// controller replaces one replica at a time and hands over leadership. Meanwhile the
// node's pool resizes back and forth and a node writes its status every 100 ms. Counted:
// the admissions that failed (the API server's audit log, every identity; with
// failurePolicy Fail a webhook that does not answer fails them) and the pools that left
// Ready; both must be 0. Then the same back to image A.
func TestRollingUpdate(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	imagesA, err := stack.ImageRefs(s.ImagesDir())
	if err != nil {
		t.Fatal(err)
	}
	dirB := os.Getenv(ImagesBEnv)
	if dirB == "" {
		dirB = filepath.Join(s.Opts.Dir, "images-b")
		if err := stack.BuildImages(ctx, dirB, "e2e-b"); err != nil {
			t.Fatal(err)
		}
	}
	imagesB, err := s.ImportImages(ctx, dirB)
	if err != nil {
		t.Fatal(err)
	}
	if imagesB[oci.WebhookImage] == imagesA[oci.WebhookImage] {
		t.Fatalf("image B is image A: %v", imagesB)
	}
	rolledTo := map[string]string{}
	t.Cleanup(func() {
		if len(rolledTo) > 0 && rolledTo[oci.WebhookImage] != imagesA[oci.WebhookImage] {
			if err := s.SetImages(imagesA); err != nil {
				t.Error(err)
			}
			if err := s.ApplyCluster(context.Background()); err != nil {
				t.Error(err)
			}
			waitRolledOut(t, stack.WebhookDeployment, 3*time.Minute)
			waitRolledOut(t, stack.ControllerDeployment, 3*time.Minute)
		}
		ensureClass(t)
	})
	for _, step := range []struct {
		name   string
		images map[string]string
	}{{"A → B", imagesB}, {"B → A", imagesA}} {
		rollout(t, step.name, step.images, startStatusWriter(t))
		rolledTo = step.images
	}
}

// rollout applies the install with images, resizes the node's pool up and down until both
// Deployments have rolled out, and checks the writes and the pool meanwhile.
func rollout(t *testing.T, name string, images map[string]string, writer *statusWriter) {
	s, ctx := suite.s, context.Background()
	base, up := wrappers.Resources(baseCPU, baseMemory), wrappers.Resources("700m", "192Mi")
	w := watchLock(t, base, up)
	t0 := time.Now()
	if err := s.SetImages(images); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCluster(ctx); err != nil {
		t.Fatal(err)
	}
	done := map[string]time.Duration{}
	resizes := 0
	sizes := []corev1.ResourceList{up, base}
	for len(done) < 2 || resizes == 0 {
		next := sizes[resizes%2]
		setClassResources(t, next)
		waitSynced(t, next.Cpu().String(), next.Memory().String(), 2*time.Minute)
		resizes++
		for _, d := range []string{stack.WebhookDeployment, stack.ControllerDeployment} {
			if _, ok := done[d]; !ok && rolledOutTo(t, d, images) {
				done[d] = time.Since(t0)
			}
		}
		if time.Since(t0) > 5*time.Minute {
			t.Fatalf("%s: not rolled out within 5 minutes: %v", name, done)
		}
	}
	if resizes%2 == 1 {
		setClassResources(t, base)
		waitSynced(t, baseCPU, baseMemory, 2*time.Minute)
		resizes++
	}
	r := writer.result()
	t1 := time.Now()
	for _, d := range []string{stack.ControllerDeployment, stack.WebhookDeployment} {
		if v := versionOf(t, d); !strings.HasSuffix(images[imageOf(d)], ":"+v) {
			t.Errorf("%s: the Pods of %s report version %q, want the tag of %s", name, d, v, images[imageOf(d)])
		}
	}
	n, by, cancelled := admissionErrors(t, t0, t1)
	lock := w.check("rolling update " + name)
	ready := lock.view(viewReady)
	t.Logf("FIGURE rolling update %s: webhook rolled out in %s, controller in %s; %d resizes of the node's pool meanwhile; %d failed admissions (audit log, all identities; %d status writes by nodes; %d requests cancelled by a stopping controller); the node's pool not Ready in %d of %d samples; the writer: %s",
		name, done[stack.WebhookDeployment].Round(time.Millisecond), done[stack.ControllerDeployment].Round(time.Millisecond),
		resizes, n, nodeWrites(t, t0, t1), cancelled, ready.bad, ready.samples, r)
	r.check(t, "rolling update "+name)
	if n > 0 {
		t.Errorf("rolling update %s: %d failed admissions: %v", name, n, by)
	}
	if ready.bad > 0 {
		t.Errorf("rolling update %s: the node's pool left Ready: %d samples, longest %s, first %s", name, ready.bad, ready.gap, ready.example)
	}
}

// imageOf is the image a Deployment runs.
func imageOf(deployment string) string {
	if deployment == stack.WebhookDeployment {
		return oci.WebhookImage
	}
	return oci.ControllerImage
}

// rolledOutTo reports whether the Deployment runs images' image in every replica, and
// nothing else.
func rolledOutTo(t testing.TB, name string, images map[string]string) bool {
	t.Helper()
	if ok, _ := suite.s.RolledOut(context.Background(), name); !ok {
		return false
	}
	pods, err := allPods(name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := suite.s.Deployment(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.Containers[0].Image != images[imageOf(name)] || !podReady(&p) {
			return false
		}
	}
	return int32(len(pods)) == *d.Spec.Replicas
}

// versionOf is the version the Deployment's Pods log at start-up (the binaries' -X
// main.version, which make images sets to the image's tag); "" unless all agree.
func versionOf(t testing.TB, name string) string {
	t.Helper()
	pods, err := suite.s.ClusterPods(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for i, p := range pods {
		log := suite.s.PodLog(p.Namespace, p.Name, 1000)
		_, rest, ok := strings.Cut(log, `"msg":"starting","version":"`)
		if !ok {
			return ""
		}
		v, _, _ := strings.Cut(rest, `"`)
		if i > 0 && v != version {
			return ""
		}
		version = v
	}
	return version
}

// TestWebhookCertificateRotation rotates the webhook's serving certificate the way the
// self-signed component documents it (hack/webhook-certs.sh again, then apply the install
// again) while a node writes its status every 100 ms: every webhook replica comes to serve
// the new certificate without a restart, and no admission fails meanwhile.
func TestWebhookCertificateRotation(t *testing.T) {
	s := requireStack(t)
	ctx := context.Background()
	ensureClass(t)
	before := webhookPodUIDs(t)
	writer := startStatusWriter(t)
	old, err := os.ReadFile(filepath.Join(s.WebhookCertDir(), "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if out, err := exec.Command(filepath.Join(s.CP.Root, "hack", "webhook-certs.sh"), s.WebhookCertDir()).CombinedOutput(); err != nil {
		t.Fatalf("hack/webhook-certs.sh: %v: %s", err, out)
	}
	if err := s.ApplyCluster(ctx); err != nil {
		t.Fatal(err)
	}
	applied := time.Since(t0)
	newPEM, err := os.ReadFile(filepath.Join(s.WebhookCertDir(), "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(newPEM) == string(old) {
		t.Fatal("hack/webhook-certs.sh wrote the same certificate")
	}
	block, _ := pem.Decode(newPEM)
	if block == nil {
		t.Fatal("tls.crt holds no PEM certificate")
	}
	serving := eventually(t, "every webhook replica serving the new certificate", 3*time.Minute, func() (bool, string) {
		pods, err := s.ClusterPods(ctx, stack.WebhookDeployment)
		if err != nil {
			return false, err.Error()
		}
		var states []string
		all := len(pods) > 0
		for _, p := range pods {
			der, err := servedCertificate(p.Status.PodIP)
			same := err == nil && string(der) == string(block.Bytes)
			all = all && same
			states = append(states, fmt.Sprintf("%s new=%v (%v)", p.Name, same, err))
		}
		return all, strings.Join(states, ", ")
	})
	// Two more writes against the new certificate, then count.
	writtenThen := writer.lastWritten()
	eventually(t, "two more status writes", 10*time.Second, func() (bool, string) {
		n := writer.lastWritten()
		return n >= writtenThen+2, fmt.Sprintf("written %d", n)
	})
	r := writer.result()
	t1 := time.Now()
	n, by, _ := admissionErrors(t, t0, t1)
	t.Logf("FIGURE webhook certificate rotated (hack/webhook-certs.sh, kubectl apply -k): applied in %s, every replica serving it %s after the apply; %d failed admissions; %s",
		applied.Round(time.Millisecond), serving.Round(time.Millisecond), n, r)
	r.check(t, "certificate rotation")
	if n > 0 {
		t.Errorf("failed admissions during the rotation: %v", by)
	}
	if after := webhookPodUIDs(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the webhook Pods were replaced by the rotation: %v → %v; the certificate must reach them as a file change", before, after)
	}
}

// webhookPodUIDs are the webhook Pods' UIDs by name.
func webhookPodUIDs(t testing.TB) map[string]string {
	t.Helper()
	pods, err := suite.s.ClusterPods(context.Background(), stack.WebhookDeployment)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods {
		out[p.Name] = string(p.UID)
	}
	return out
}

// servedCertificate is the leaf certificate the webhook at ip serves (DER).
func servedCertificate(ip string) ([]byte, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(ip, "9443"), &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // only the certificate is read
		ServerName:         stack.WebhookDeployment + "." + v1alpha1.DefaultSystemNamespace + ".svc",
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certificate")
	}
	return certs[0].Raw, nil
}
