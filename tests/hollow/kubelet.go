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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/agent/manifest"
	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// kubelet plays kubelet for every hollow node at once, as each node's own kubelet would
// treat two kinds of pods, and through each node's own client (its identity):
//
//   - static pods: it watches the shared manifest directory, and for each placeholder
//     manifest keeps one mirror pod in the API server with the manifest's spec; it starts
//     the pod through the agent's shim API (Create, Start), as the placeholder shim does,
//     and reports the pod running and ready. A changed manifest rebuilds the pod
//     (Shutdown, a new mirror pod), a removed one deletes it. A node whose agent is stopped
//     gets no shim calls (its shim could not reach it); its pod starts when the pass is
//     retried.
//   - pods the API server binds to a hollow node (a DaemonSet's): it reports them running
//     and ready, and completes their graceful deletion (the final delete with grace 0).
//
// Both kinds get the same status write (runningStatus), so a pool's placeholder pod and a
// DaemonSet's pod cost the API server the same pod lifecycle. A stopped node's pods are left
// as they are, as a lost machine leaves them.
type kubelet struct {
	dir     string
	clients func(node string) client.Client // a node's own client, nil for a node not played or stopped
	uids    func(node string) types.UID     // the UID of a node's Node object
	agents  func(node string) shim
	files   workqueue.TypedRateLimitingInterface[string]

	pods     cache.SharedIndexInformer // pods bound to a node, every namespace
	podQueue workqueue.TypedRateLimitingInterface[string]

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

// indexPodNode indexes the pod informer by spec.nodeName (StartNode requeues a node's pods).
const indexPodNode = "spec.nodeName"

func newKubelet(dir string, reader kubernetes.Interface, clients func(string) client.Client, uids func(string) types.UID, agents func(string) shim) (*kubelet, error) {
	limiter := func() workqueue.TypedRateLimiter[string] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second)
	}
	bound := fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	pods := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = bound
			return reader.CoreV1().Pods(corev1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = bound
			return reader.CoreV1().Pods(corev1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{indexPodNode: func(o any) ([]string, error) {
		return []string{o.(*corev1.Pod).Spec.NodeName}, nil
	}})
	k := &kubelet{dir: dir, clients: clients, uids: uids, agents: agents, running: map[string]mirror{}, pods: pods,
		files: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hollow-kubelet-manifests"}),
		podQueue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hollow-kubelet-pods"}),
	}
	enqueue := func(o any) {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			k.podQueue.Add(key)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return nil, err
	}
	return k, nil
}

// run watches the directory and the pods and runs workers of each until ctx ends.
func (k *kubelet) run(ctx context.Context, workers int) error {
	go k.pods.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), k.pods.HasSynced) {
		return ctx.Err()
	}
	logf.FromContext(ctx).Info("hollow kubelet running", "workers", workers)
	for range workers {
		go func() {
			for k.nextFile(ctx) {
			}
		}()
		go func() {
			for k.nextPod(ctx) {
			}
		}()
	}
	go func() { <-ctx.Done(); k.files.ShutDown(); k.podQueue.ShutDown() }()
	return manifest.Watch(ctx, k.dir, 30*time.Second, k.resync, func() { k.resync("") })
}

// resync queues every manifest file of the pool with file key key (all files for ""), and
// every pod it runs for one.
func (k *kubelet) resync(key string) {
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		if fk, ok := manifest.PoolFromFileName(e.Name()); ok && (key == "" || fk == key) {
			k.files.Add(e.Name())
		}
	}
	k.mu.Lock()
	for file := range k.running {
		if fk, ok := manifest.PoolFromFileName(file); ok && (key == "" || fk == key) {
			k.files.Add(file)
		}
	}
	k.mu.Unlock()
}

// resyncNode queues the bound pods of node (a node started again).
func (k *kubelet) resyncNode(node string) {
	objs, _ := k.pods.GetIndexer().ByIndex(indexPodNode, node)
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			k.podQueue.Add(key)
		}
	}
	k.resync("")
}

func (k *kubelet) nextFile(ctx context.Context) bool {
	key, quit := k.files.Get()
	if quit {
		return false
	}
	defer k.files.Done(key)
	if err := k.sync(ctx, key); err != nil {
		logf.FromContext(ctx).V(1).Info("hollow kubelet: retrying", "file", key, "error", err.Error())
		k.files.AddRateLimited(key)
		return true
	}
	k.files.Forget(key)
	return true
}

func (k *kubelet) nextPod(ctx context.Context) bool {
	key, quit := k.podQueue.Get()
	if quit {
		return false
	}
	defer k.podQueue.Done(key)
	if err := k.syncPod(ctx, key); err != nil {
		logf.FromContext(ctx).V(1).Info("hollow kubelet: retrying", "pod", key, "error", err.Error())
		k.podQueue.AddRateLimited(key)
		return true
	}
	k.podQueue.Forget(key)
	return true
}

// syncPod makes a pod bound to a hollow node (not a mirror pod: sync keeps those) run, or
// completes its deletion, through its node's client.
func (k *kubelet) syncPod(ctx context.Context, key string) error {
	o, exists, err := k.pods.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := o.(*corev1.Pod)
	if _, isMirror := pod.Annotations[manifest.AnnotationConfigMirror]; isMirror {
		return nil
	}
	c := k.clients(pod.Spec.NodeName)
	if c == nil {
		return nil // not a hollow node, or a stopped one
	}
	if pod.DeletionTimestamp != nil {
		// kubelet has stopped the containers: it removes the pod for good.
		err := c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(pod.UID)})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if podRunningAndReady(pod) {
		return nil
	}
	p := pod.DeepCopy()
	runningStatus(p, time.Now())
	logf.FromContext(ctx).V(1).Info("hollow kubelet: pod running", "pod", key)
	err = c.Status().Update(ctx, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
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
	// A static pod names no node: its kubelet's. The shared directory's manifests say theirs
	// in the node label (the node name itself for names of up to 63 characters).
	node := pod.Labels[v1alpha1.LabelNode]
	c := k.clients(node)
	if node == "" || c == nil {
		return nil
	}
	if ok {
		if err := k.kill(ctx, key, cur); err != nil {
			return err
		}
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
	// kubelet makes its Node the owner of its mirror pods (NodeRestriction requires it).
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: k.uids(node), Controller: ptr.To(true)}}
	if err := c.Create(ctx, m); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// A mirror pod of an earlier run of the manifest: replace it.
		_ = c.Delete(ctx, m, client.GracePeriodSeconds(0))
		return err
	}
	cur = mirror{hash: hash, pod: m}
	k.mu.Lock()
	k.running[key] = cur
	k.mu.Unlock()
	return k.start(ctx, key, cur)
}

// start runs the pod through the agent's shim API and reports it running and ready.
func (k *kubelet) start(ctx context.Context, key string, cur mirror) error {
	node := cur.pod.Spec.NodeName
	s, c := k.agents(node), k.clients(node)
	if s == nil || c == nil {
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
	runningStatus(p, time.Now())
	if err := c.Status().Update(ctx, p); err != nil {
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
	node := cur.pod.Spec.NodeName
	c := k.clients(node)
	if c == nil {
		return errAgentDown
	}
	if s := k.agents(node); s != nil {
		_, _ = s.Shutdown(ctx, &v1.ShutdownRequest{Identity: identity(cur.pod)})
	}
	err := c.Delete(ctx, cur.pod, client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(cur.pod.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	k.mu.Lock()
	delete(k.running, key)
	k.mu.Unlock()
	return nil
}

// runningStatus is the status kubelet reports for a pod whose containers all started and
// are ready: what both kinds of pods get.
func runningStatus(p *corev1.Pod, now time.Time) {
	t := metav1.NewTime(now)
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &t
	p.Status.Conditions = nil
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: t})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
}

// podRunningAndReady reports whether the pod is Running with Ready=True.
func podRunningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// identity is what the shim tells the agent of the mirror pod's static pod: CRI's pod UID
// is the static pod's.
func identity(pod *corev1.Pod) *v1.Identity {
	uid := pod.Annotations[manifest.AnnotationConfigMirror]
	return &v1.Identity{Namespace: "k8s.io", ContainerId: uid, SandboxId: uid, Sandbox: true,
		PodName: pod.Name, PodNamespace: pod.Namespace, PodUid: uid,
		PoolName: pod.Annotations[v1alpha1.AnnotationPoolName], PoolUid: pod.Annotations[v1alpha1.AnnotationPoolUID]}
}
