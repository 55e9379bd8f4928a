package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/agent/shimapi"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// kubeletStandIn plays kubelet and the placeholder shim for one node, the way they behave
// for a static pod: it watches the manifest directory (polling, like kubelet's file source),
// and for each placeholder manifest keeps one mirror pod in the API whose spec is the
// manifest's; when the manifest changes it rebuilds the pod (shim Shutdown of the old pod,
// a new mirror pod, shim Create and Start of the new one), when it goes it removes the pod.
// A shim Create the agent refuses is retried on the next tick, as kubelet retries.
type kubeletStandIn struct {
	n      *testNode
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex         // guards running, creates, logged and dropped
	running map[string]running // by manifest file
	creates int
	logged  map[string]bool
	// dropped are the mirror pods dropMirror deleted, by name.
	dropped []string

	// seen and seenAt: the newest hash of each changed manifest and when it was first seen
	// (used by the sync goroutine only).
	seen   map[string]string
	seenAt map[string]time.Time
}

type running struct {
	hash string
	uid  types.UID
}

// rebuildDelay is how long the stand-in waits before rebuilding a pod whose manifest changed.
const rebuildDelay = 300 * time.Millisecond

func startKubelet(n *testNode) *kubeletStandIn {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubeletStandIn{n: n, cancel: cancel, done: make(chan struct{}), running: map[string]running{},
		seen: map[string]string{}, seenAt: map[string]time.Time{}}
	go func() {
		defer close(k.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			k.sync(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	n.t.Cleanup(k.stop)
	return k
}

func (k *kubeletStandIn) stop() {
	k.cancel()
	<-k.done
}

func (k *kubeletStandIn) sync(ctx context.Context) {
	files, _ := filepath.Glob(filepath.Join(k.n.manifestDir, "sandbox-pool-*.yaml"))
	seen := map[string]bool{}
	for _, f := range files {
		seen[f] = true
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pod corev1.Pod
		if err := yaml.Unmarshal(data, &pod); err != nil {
			continue // a half-edited file: kubelet skips it too
		}
		hash := pod.Annotations[v1alpha1.AnnotationManifestHash]
		if len(hash) < 16 {
			// Read while a test writes it in place (not atomically, as an editor may): the
			// YAML so far parses, but is not the whole pod. The next tick reads it whole.
			continue
		}
		k.mu.Lock()
		cur, ok := k.running[f]
		k.mu.Unlock()
		if ok && cur.hash == hash {
			continue
		}
		if ok {
			// kubelet takes a moment to act on a changed manifest; the stand-in takes a
			// fixed rebuildDelay, so a step the agent takes too early (node-ctl grown
			// before the bigger pod exists) stays visible long enough to be caught.
			if k.seen[f] != hash {
				k.seen[f], k.seenAt[f] = hash, time.Now()
			}
			if time.Since(k.seenAt[f]) < rebuildDelay {
				continue
			}
			k.kill(ctx, cur)
		}
		k.run(ctx, f, hash, &pod)
	}
	k.mu.Lock()
	gone := map[string]running{}
	for f, r := range k.running {
		if !seen[f] {
			gone[f] = r
			delete(k.running, f)
		}
	}
	k.mu.Unlock()
	for _, r := range gone {
		k.kill(ctx, r)
	}
}

// identity is what the shim knows of a pod: kubelet's UID of the static pod (the mirror
// pod's kubernetes.io/config.mirror annotation), its name and namespace, and the pool.
func (k *kubeletStandIn) identity(pod *corev1.Pod) *v1.Identity {
	uid := pod.Annotations[manifest.AnnotationConfigMirror]
	return &v1.Identity{Namespace: "k8s.io", ContainerId: uid, SandboxId: uid, Sandbox: true,
		PodName: pod.Name, PodNamespace: pod.Namespace, PodUid: uid,
		PoolName: pod.Annotations[v1alpha1.AnnotationPoolName], PoolUid: pod.Annotations[v1alpha1.AnnotationPoolUID]}
}

// run creates the mirror pod and starts it through the agent's shim API.
func (k *kubeletStandIn) run(ctx context.Context, file, hash string, static *corev1.Pod) {
	mirror := static.DeepCopy()
	mirror.Name, mirror.UID = static.Name+"-"+k.n.name, ""
	mirror.Spec.NodeName = k.n.name
	if mirror.Annotations == nil {
		mirror.Annotations = map[string]string{}
	}
	// kubelet keeps a static pod's metadata.uid, or hashes its content and file (here: the
	// content's hash), and marks the mirror pod with it and with the pod's source.
	uid := string(static.UID)
	if uid == "" {
		uid = "static-" + hash[:16]
	}
	mirror.Annotations[manifest.AnnotationConfigMirror] = uid
	mirror.Annotations[manifest.AnnotationConfigSource] = manifest.ConfigSourceFile
	var existing corev1.Pod
	if err := admin.Get(ctx, client.ObjectKeyFromObject(mirror), &existing); err == nil {
		_ = admin.Delete(ctx, &existing, client.GracePeriodSeconds(0))
		return // next tick, once it is gone
	}
	if err := admin.Create(ctx, mirror); err != nil {
		k.logf("creating the mirror pod: %v", err)
		return
	}
	c, err := shimapi.Dial(ctx, k.n.shimAddr)
	if err != nil {
		k.logf("dialling the agent: %v", err)
		_ = admin.Delete(ctx, mirror, client.GracePeriodSeconds(0))
		return
	}
	defer c.Close()
	id := k.identity(mirror)
	k.mu.Lock()
	k.creates++
	k.mu.Unlock()
	if _, err := c.Create(ctx, &v1.CreateRequest{Identity: id}); err != nil {
		k.logf("shim Create: %v", err)
		_ = admin.Delete(ctx, mirror, client.GracePeriodSeconds(0))
		return
	}
	if _, err := c.Start(ctx, &v1.StartRequest{Identity: id, ShimPid: uint32(os.Getpid())}); err != nil {
		// The sandbox fails; kubelet retries the pod while its manifest is there, and
		// removes it with its mirror pod once it is gone: the next tick starts over.
		k.logf("shim Start: %v", err)
		_ = admin.Delete(ctx, mirror, client.GracePeriodSeconds(0))
		return
	}
	mirror.Status.Phase = corev1.PodRunning
	mirror.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	_ = admin.Status().Update(ctx, mirror)
	k.mu.Lock()
	k.running[file] = running{hash: hash, uid: mirror.UID}
	k.mu.Unlock()
}

// kill stops a running pod: shim Shutdown, mirror pod deleted.
func (k *kubeletStandIn) kill(ctx context.Context, r running) {
	var pods corev1.PodList
	_ = admin.List(ctx, &pods, client.MatchingFields{"spec.nodeName": k.n.name})
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.UID != r.uid {
			continue
		}
		if c, err := shimapi.Dial(ctx, k.n.shimAddr); err == nil {
			_, _ = c.Shutdown(ctx, &v1.ShutdownRequest{Identity: k.identity(p)})
			_ = c.Close()
		}
		_ = admin.Delete(ctx, p, client.GracePeriodSeconds(0))
	}
}

// logf logs an error once per distinct message (kubelet retries every tick).
func (k *kubeletStandIn) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.logged == nil {
		k.logged = map[string]bool{}
	}
	if !k.logged[msg] {
		k.logged[msg] = true
		k.n.t.Logf("kubelet stand-in: %s", msg)
	}
}

// Creates is how many pods the stand-in has created (each a pod build or rebuild).
func (k *kubeletStandIn) Creates() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.creates
}
