package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Spec is everything a placeholder pod's manifest depends on. Render turns it into bytes;
// the same Spec always gives the same bytes.
type Spec struct {
	// PoolName is the full name of the SandboxPool. It names the file, is the
	// sandbox-pool.io/pool-name annotation, and (as a label value, hashed when longer than
	// 63 characters) the sandbox-pool.io/pool-name label.
	PoolName string
	// PoolUID is the pool's metadata.uid, the sandbox-pool.io/pool-uid annotation that
	// CleanupOrphans tests at agent start.
	PoolUID string
	// ClassName is the pool's class, the sandbox-pool.io/class label.
	ClassName string
	// NodeName is the node the agent runs on, the sandbox-pool.io/node label. kubelet names
	// the mirror pod PodName(Piece) + "-" + NodeName.
	NodeName string
	// Piece numbers this pod among the pool's placeholder pods (1 to MaxPiece): the pod is
	// PodName(Piece), its file FileName(PoolName, Piece). The pool's lock is the sum of its
	// pieces' requests; the agent numbers new pieces above every number on disk.
	Piece int

	// Resources is what the placeholder container requests, and limits to the same
	// quantities (extended resources and hugepages, which kubelet only accepts with limits
	// equal to requests, work too): this piece's part of the pool's lock. At least one
	// resource; each greater than zero. A piece that holds cpu and memory is Guaranteed; a
	// piece added for a growth of one resource holds only that one.
	Resources corev1.ResourceList
	// Template shapes the pod: annotations, tolerations, runtimeClassName, priority and
	// priorityClassName. agentImage is not used.
	//
	// kubelet never resolves a priorityClassName of a static pod, so its own view (eviction
	// order, critical-pod handling) comes from the number in priority alone. The mirror pod
	// in the API server, in turn, goes through the Priority admission plugin, which computes
	// the priority from priorityClassName (or from the global default class when it is
	// empty) and rejects a pod whose priority differs from that value. A manifest with a
	// bare priority and no priorityClassName therefore runs on the node, but its mirror pod
	// is rejected unless the number happens to equal the default. Render copies both fields
	// as they are; the controller puts the class name and its resolved value into every
	// pool, so they agree.
	Template v1alpha1.PlaceholderPodTemplate
	// Namespace of the static pod; empty means v1alpha1.DefaultPodNamespace. kubelet creates
	// the mirror pod only when the namespace exists.
	Namespace string
	// Image is the pause image of the single container.
	Image string
	// NetnsEnabled gives the pod a network namespace of its own (and an IP). When false the
	// pod uses the host network: no CNI call, no IP address spent.
	NetnsEnabled bool
}

// maxObjectNameLength is the longest name of a Kubernetes object (a DNS subdomain).
const maxObjectNameLength = validation.DNS1123SubdomainMaxLength

// MaxPiece is the largest piece number. A pool uses a new number for each piece it adds
// (growths, replacements), so a million lasts: one resize a day for 2,700 years.
const MaxPiece = 999999

// MaxNodeNameLength is the longest node name a placeholder pod can have: kubelet names
// the mirror pod PodName(piece) + "-" + the node name, and rejects the whole static pod
// when that name is longer than 253 characters; the piece number may have 6 digits.
const MaxNodeNameLength = maxObjectNameLength - len(v1alpha1.PlaceholderPodName) - 1 - len("999999") - 1

// kubeletConfigAnnotationPrefix starts the annotations kubelet sets on static and mirror
// pods itself (kubernetes.io/config.hash, .mirror, .seen, .source). A static pod that
// carries kubernetes.io/config.mirror is taken by kubelet for a mirror pod and never run.
const kubeletConfigAnnotationPrefix = "kubernetes.io/config."

// kubelet's annotations on the pods it runs (k8s.io/kubernetes/pkg/kubelet/types, v1.37.2),
// which tell a mirror pod of one of its static pods from any other pod.
const (
	// AnnotationConfigMirror marks a mirror pod; its value is the UID of the static pod it
	// mirrors (for the agent's manifests, the manifest's metadata.uid).
	AnnotationConfigMirror = corev1.MirrorPodAnnotationKey
	// AnnotationConfigSource is the source kubelet read a pod from: ConfigSourceFile for the
	// static pods of its staticPodPath, "api" for the pods it reads from the API server
	// (kubelet sets it on every pod, replacing any value the pod carried). A mirror pod
	// carries its static pod's.
	AnnotationConfigSource = kubeletConfigAnnotationPrefix + "source"
	// ConfigSourceFile is AnnotationConfigSource of a static pod of kubelet's staticPodPath.
	ConfigSourceFile = "file"
)

// Validate checks what Render needs to produce a pod kubelet accepts and a file name that
// stays inside the manifest directory. Each error names the field (poolName, resources[cpu],
// template.annotations[...]). The pool's own rules (quantity syntax, resource names,
// tolerations) are the CUE schema's job and are not restated here.
func (s *Spec) Validate() error {
	var errs field.ErrorList
	errs = append(errs, validateObjectName(field.NewPath("poolName"), s.PoolName)...)
	if s.PoolUID == "" {
		errs = append(errs, field.Required(field.NewPath("poolUID"), "the orphan test at agent start needs it"))
	}
	errs = append(errs, validateObjectName(field.NewPath("className"), s.ClassName)...)
	if s.Piece < 1 || s.Piece > MaxPiece {
		errs = append(errs, field.Invalid(field.NewPath("piece"), s.Piece, fmt.Sprintf("must be between 1 and %d", MaxPiece)))
	}
	nodePath := field.NewPath("nodeName")
	errs = append(errs, validateObjectName(nodePath, s.NodeName)...)
	if len(s.NodeName) > MaxNodeNameLength {
		errs = append(errs, field.Invalid(nodePath, s.NodeName, fmt.Sprintf(
			"must be at most %d characters: kubelet names the mirror pods %s-{piece}-{nodeName}, at most %d",
			MaxNodeNameLength, v1alpha1.PlaceholderPodName, maxObjectNameLength)))
	}
	if s.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(s.Namespace) {
			errs = append(errs, field.Invalid(field.NewPath("namespace"), s.Namespace, msg))
		}
	}
	imagePath := field.NewPath("image")
	switch {
	case s.Image == "":
		errs = append(errs, field.Required(imagePath, "the pause image"))
	case strings.TrimSpace(s.Image) != s.Image:
		errs = append(errs, field.Invalid(imagePath, s.Image, "must not have leading or trailing whitespace"))
	}
	errs = append(errs, validateResources(field.NewPath("resources"), s.Resources)...)
	annPath := field.NewPath("template", "annotations")
	for _, k := range slices.Sorted(maps.Keys(s.Template.Annotations)) {
		if strings.HasPrefix(k, kubeletConfigAnnotationPrefix) {
			errs = append(errs, field.Forbidden(annPath.Key(k), "kubelet owns the "+kubeletConfigAnnotationPrefix+"* annotations of static pods"))
		}
	}
	return errs.ToAggregate()
}

func validateObjectName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

func validateResources(p *field.Path, rl corev1.ResourceList) field.ErrorList {
	if len(rl) == 0 {
		return field.ErrorList{field.Required(p, "a placeholder pod holds at least one resource")}
	}
	var errs field.ErrorList
	for _, name := range sortedResourceNames(rl) {
		if q := rl[name]; q.Sign() <= 0 {
			errs = append(errs, field.Invalid(p.Key(string(name)), q.String(), "must be greater than zero"))
		}
	}
	return errs
}
