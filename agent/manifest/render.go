package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// ContainerName is the name of the placeholder pod's only container.
const ContainerName = "placeholder"

// header starts every manifest, for the person who opens the manifest directory. It is part
// of the hashed content.
const header = "# Placeholder pod of a SandboxPool, written by placeholder-agent. Do not edit:\n" +
	"# the agent rewrites this file whenever it differs from what the pool asks for.\n"

// Render returns the static pod manifest of s: a v1 Pod as YAML (sigs.k8s.io/yaml, keys
// sorted), after a comment header. The same Spec gives the same bytes, always: map order
// does not matter, and each quantity is written in the canonical form of its format
// ("4000m" as "4", "16384Mi" as "16Gi"; a quantity given without a binary suffix stays
// decimal).
//
// The pod, in docs/design.md §2 and §3.5 terms:
//   - metadata.name PodName(s.Piece) (kubelet appends "-" + the node name for the mirror
//     pod), metadata.namespace s.Namespace or v1alpha1.DefaultPodNamespace;
//   - labels sandbox-pool.io/class, /node and /pool-name (values through
//     naming.LabelValue, so long names stay valid label values) and /skip-cgroup=true;
//   - annotations: the template's, then, replacing any template key of the same name,
//     sandbox-pool.io/pool-name (the full name), /pool-uid, /skip-cgroup=true and
//     /manifest-hash;
//   - hostNetwork unless s.NetnsEnabled; runtimeClassName, priorityClassName, priority and
//     tolerations from the template (see Spec.Template about priority);
//     enableServiceLinks and automountServiceAccountToken false (the pause container needs
//     neither, and a mirror pod may not use a service account);
//     terminationGracePeriodSeconds 0: the container is the pause image run by a shim with
//     no process, there is nothing to drain, and a replaced piece stops without waiting;
//   - one container, ContainerName, running s.Image (imagePullPolicy IfNotPresent), with
//     requests and limits both equal to s.Resources.
//
// metadata.uid is set (StaticPodUID): kubelet keeps the UID a static pod's manifest gives
// instead of hashing the file, and then it is the pod's UID on the node, its
// kubernetes.io/config.hash annotation, the mirror pod's kubernetes.io/config.mirror
// annotation and the pod UID CRI hands the runtime. It lets the agent tell the pods and
// sandboxes of its own manifests from any other pod that carries the same names.
//
// The sandbox-pool.io/manifest-hash annotation is the hex SHA-256 of the manifest Render
// produces for the same Spec without that annotation (header and uid included); File.Verify
// checks it. Because it hashes the serialised bytes, a new serialisation (a different
// k8s.io/api or sigs.k8s.io/yaml) may change the hash, and so the file, without any change
// to the Spec.
func Render(s Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("rendering manifest of pool %q: %w", s.PoolName, err)
	}
	pod := s.pod()
	uid, err := staticPodUID(pod)
	if err != nil {
		return nil, fmt.Errorf("rendering manifest of pool %q: %w", s.PoolName, err)
	}
	pod.UID = uid
	unhashed, err := marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("rendering manifest of pool %q: %w", s.PoolName, err)
	}
	pod.Annotations[v1alpha1.AnnotationManifestHash] = hashOf(unhashed)
	data, err := marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("rendering manifest of pool %q: %w", s.PoolName, err)
	}
	return data, nil
}

// pod builds the Pod of a valid Spec, without the manifest-hash annotation. Nothing in it
// aliases s.
func (s *Spec) pod() *corev1.Pod {
	ns := s.Namespace
	if ns == "" {
		ns = v1alpha1.DefaultPodNamespace
	}
	annotations := make(map[string]string, len(s.Template.Annotations)+3)
	maps.Copy(annotations, s.Template.Annotations)
	delete(annotations, v1alpha1.AnnotationManifestHash)
	annotations[v1alpha1.AnnotationPoolName] = s.PoolName
	annotations[v1alpha1.AnnotationPoolUID] = s.PoolUID
	annotations[v1alpha1.AnnotationSkipCgroup] = "true"

	var tolerations []corev1.Toleration
	for i := range s.Template.Tolerations {
		tolerations = append(tolerations, *s.Template.Tolerations[i].DeepCopy())
	}
	var runtimeClassName *string
	if s.Template.RuntimeClassName != "" {
		runtimeClassName = ptr.To(s.Template.RuntimeClassName)
	}
	var priority *int32
	if s.Template.Priority != nil {
		priority = ptr.To(*s.Template.Priority)
	}

	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      PodName(s.Piece),
			Namespace: ns,
			Labels: map[string]string{
				v1alpha1.LabelClass:      naming.LabelValue(s.ClassName),
				v1alpha1.LabelNode:       naming.LabelValue(s.NodeName),
				v1alpha1.LabelPoolName:   naming.LabelValue(s.PoolName),
				v1alpha1.LabelSkipCgroup: "true",
			},
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			HostNetwork:                   !s.NetnsEnabled,
			RuntimeClassName:              runtimeClassName,
			PriorityClassName:             s.Template.PriorityClassName,
			Priority:                      priority,
			Tolerations:                   tolerations,
			EnableServiceLinks:            ptr.To(false),
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           s.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Resources: corev1.ResourceRequirements{
					Requests: s.Resources.DeepCopy(),
					Limits:   s.Resources.DeepCopy(),
				},
			}},
		},
	}
}

// marshal is the one serialisation of a manifest: the header, then the pod as YAML.
func marshal(pod *corev1.Pod) ([]byte, error) {
	body, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encoding pod: %w", err)
	}
	return append([]byte(header), body...), nil
}

// staticPodUIDLength is how many hex characters a static pod UID has: as many as the UIDs
// kubelet derives itself (an FNV-128 hash), so it fits wherever kubelet puts one (the pod's
// directory, its cgroup's name).
const staticPodUIDLength = 32

// staticPodUID is the UID of pod, which has neither a UID nor the manifest-hash annotation
// yet: the first 32 hex characters of the SHA-256 of its serialised form. The pod names its
// pool (with the pool's UID), node and piece, so no two manifests the agents write share a
// UID, and a manifest with another content has another UID, as kubelet's own hashed UIDs do.
func staticPodUID(pod *corev1.Pod) (types.UID, error) {
	data, err := marshal(pod)
	if err != nil {
		return "", err
	}
	return types.UID(hashOf(data)[:staticPodUIDLength]), nil
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sortedResourceNames returns the names of rl in order.
func sortedResourceNames(rl corev1.ResourceList) []corev1.ResourceName {
	return slices.Sorted(maps.Keys(rl))
}
