package hollow

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/agent/manifest"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// kubelet plays kubelet and the placeholder shim for every hollow node at once, the way
// they behave for a static pod: it watches the shared manifest directory, and for each
// placeholder manifest keeps one mirror pod in the API server with the manifest's spec;
// it starts the pod through the agent's shim API (Create, Start) and reports the pod
// Running and Ready. A changed manifest rebuilds the pod (Shutdown, a new mirror pod), a
// removed one deletes it. A node whose agent is stopped gets no shim calls (its shim could
// not reach it); its pod is started when the pass is retried.
type kubelet struct {
	dir    string
	client client.Client // writes, uncached
	agents func(node string) shim
	queue  workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex // guards running
	running map[string]mirror
}

// shim is the agent's side of the placeholder shim API that the hollow kubelet calls.
type shim interface {
	Create(context.Context, *v1.CreateRequest) (*v1.CreateResponse, error)
	Start(context.Context, *v1.StartRequest) (*v1.StartResponse, error)
	Shutdown(context.Context, *v1.ShutdownRequest) (*v1.ShutdownResponse, error)
}

// mirror is a pod the hollow kubelet runs, by manifest file name.
type mirror struct {
	hash    string
	pod     *corev1.Pod // as created, with the server's UID
	started bool
}

func newKubelet(dir string, c client.Client, agents func(string) shim) *kubelet {
	return &kubelet{dir: dir, client: c, agents: agents, running: map[string]mirror{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hollow-kubelet"})}
}

// run watches the directory and runs workers until ctx ends.
func (k *kubelet) run(ctx context.Context, workers int) error {
	for range workers {
		go func() {
			for k.next(ctx) {
			}
		}()
	}
	go func() { <-ctx.Done(); k.queue.ShutDown() }()
	return manifest.Watch(ctx, k.dir, 30*time.Second, k.resync, func() { k.resync("") })
}

// resync queues every manifest file of the pool with file key key (all files for ""), and
// every pod it runs for one.
func (k *kubelet) resync(key string) {
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		if fk, ok := manifest.PoolFromFileName(e.Name()); ok && (key == "" || fk == key) {
			k.queue.Add(e.Name())
		}
	}
	k.mu.Lock()
	for file := range k.running {
		if fk, ok := manifest.PoolFromFileName(file); ok && (key == "" || fk == key) {
			k.queue.Add(file)
		}
	}
	k.mu.Unlock()
}

func (k *kubelet) next(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil {
		logf.FromContext(ctx).V(1).Info("hollow kubelet: retrying", "file", key, "error", err.Error())
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

// sync makes the mirror pod of one manifest file (key is its base name) match the file.
func (k *kubelet) sync(ctx context.Context, key string) error {
	data, err := os.ReadFile(filepath.Join(k.dir, key))
	k.mu.Lock()
	cur, ok := k.running[key]
	k.mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		if ok {
			return k.kill(ctx, key, cur)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil // a half-written file: kubelet skips it too, the rename brings the next event
	}
	hash := pod.Annotations[v1alpha1.AnnotationManifestHash]
	if ok && cur.hash == hash {
		if !cur.started {
			return k.start(ctx, key, cur)
		}
		return nil
	}
	if ok {
		if err := k.kill(ctx, key, cur); err != nil {
			return err
		}
	}
	// A static pod names no node: its kubelet's. The shared directory's manifests say theirs
	// in the node label (the node name itself for names of up to 63 characters).
	node := pod.Labels[v1alpha1.LabelNode]
	if node == "" {
		return nil
	}
	m := pod.DeepCopy()
	m.Name, m.Spec.NodeName, m.UID = pod.Name+"-"+node, node, ""
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	// kubelet keeps a static pod's metadata.uid (else it hashes the file) and marks the
	// mirror pod with it and with the pod's source.
	static := string(pod.UID)
	if static == "" {
		static = hash
	}
	m.Annotations[manifest.AnnotationConfigMirror], m.Annotations[manifest.AnnotationConfigSource] = static, manifest.ConfigSourceFile
	if err := k.client.Create(ctx, m); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// A mirror pod of an earlier run of the manifest: replace it.
		_ = k.client.Delete(ctx, m, client.GracePeriodSeconds(0))
		return err
	}
	cur = mirror{hash: hash, pod: m}
	k.mu.Lock()
	k.running[key] = cur
	k.mu.Unlock()
	return k.start(ctx, key, cur)
}

// start runs the pod through the agent's shim API and reports it Running and Ready.
func (k *kubelet) start(ctx context.Context, key string, cur mirror) error {
	s := k.agents(cur.pod.Spec.NodeName)
	if s == nil {
		return errAgentDown
	}
	id := identity(cur.pod)
	if _, err := s.Create(ctx, &v1.CreateRequest{Identity: id}); err != nil {
		return err
	}
	if _, err := s.Start(ctx, &v1.StartRequest{Identity: id}); err != nil {
		return err
	}
	p := cur.pod.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := k.client.Status().Update(ctx, p); err != nil {
		return err
	}
	cur.started, cur.pod = true, p
	k.mu.Lock()
	k.running[key] = cur
	k.mu.Unlock()
	return nil
}

var errAgentDown = errors.New("the node's agent is not running")

// kill stops a pod: shim Shutdown (when its agent runs), mirror pod deleted.
func (k *kubelet) kill(ctx context.Context, key string, cur mirror) error {
	if s := k.agents(cur.pod.Spec.NodeName); s != nil {
		_, _ = s.Shutdown(ctx, &v1.ShutdownRequest{Identity: identity(cur.pod)})
	}
	err := k.client.Delete(ctx, cur.pod, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(cur.pod.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	k.mu.Lock()
	delete(k.running, key)
	k.mu.Unlock()
	return nil
}

// identity is what the shim tells the agent of the mirror pod's static pod: CRI's pod UID
// is the static pod's.
func identity(pod *corev1.Pod) *v1.Identity {
	uid := pod.Annotations[manifest.AnnotationConfigMirror]
	return &v1.Identity{Namespace: "k8s.io", ContainerId: uid, SandboxId: uid, Sandbox: true,
		PodName: pod.Name, PodNamespace: pod.Namespace, PodUid: uid,
		PoolName: pod.Annotations[v1alpha1.AnnotationPoolName], PoolUid: pod.Annotations[v1alpha1.AnnotationPoolUID]}
}
