package agent

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentcube/sandboxpool/agent/manifest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/support"
)

// A pool's lock is a set of placeholder pods, its pieces (docs/agent.md, "The lock"): these
// helpers read them from the manifest directory and the API server.

// pieceFiles are pool's manifests on n, in piece order.
func pieceFiles(n *testNode, pool string) []manifest.File {
	files, _ := manifest.Pieces(n.manifestDir, pool)
	return files
}

// diskLock is the sum of the requests of pool's manifests on n: what kubelet runs.
func diskLock(n *testNode, pool string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, f := range pieceFiles(n, pool) {
		support.AddResources(out, f.Resources)
	}
	return out
}

// mirrorPods are n's placeholder mirror pods that are not being deleted.
func mirrorPods(n *testNode) []corev1.Pod {
	var pods corev1.PodList
	if err := admin.List(context.Background(), &pods, client.InNamespace(v1alpha1.DefaultPodNamespace)); err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName == n.name && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// mirrorLock is the sum of the requests of n's placeholder mirror pods that have not
// failed: what the scheduler counts. No pod counts as nothing.
func mirrorLock(n *testNode) corev1.ResourceList {
	var live []corev1.Pod
	for _, p := range mirrorPods(n) {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	return support.Requests(live...)
}

// memOf is the memory of l, "0" when it has none.
func memOf(l corev1.ResourceList) string {
	q := l[corev1.ResourceMemory]
	return q.String()
}

// diskState is the pool's manifests on n as bytes, by file name, to tell whether any
// changed.
func diskState(n *testNode, pool string) map[string]string {
	out := map[string]string{}
	for _, f := range pieceFiles(n, pool) {
		out[f.Path] = string(f.Data)
	}
	return out
}

// registerNode creates n's Node object with the capacity kubelet would report, as kubelet
// registers its node: the agent reads it to know whether a growth fits.
func registerNode(ctx context.Context, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := admin.Create(ctx, node); err != nil {
		return err
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity.DeepCopy()
	return admin.Status().Update(ctx, node)
}
