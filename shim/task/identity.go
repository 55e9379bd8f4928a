package task

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/agentcube/sandboxpool/agent/shimapi/v1"
)

// Annotations CRI puts into the OCI spec of every container of a pod (containerd's
// internal/cri/annotations, which is not importable).
const (
	annotationContainerType = "io.kubernetes.cri.container-type"
	containerTypeSandbox    = "sandbox"
	// AnnotationSandboxID is also what the manager groups a pod's containers by.
	AnnotationSandboxID        = "io.kubernetes.cri.sandbox-id"
	annotationSandboxName      = "io.kubernetes.cri.sandbox-name"
	annotationSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	annotationSandboxUID       = "io.kubernetes.cri.sandbox-uid"
	annotationContainerName    = "io.kubernetes.cri.container-name"
)

// Pod annotations of a placeholder pod (schema/v1alpha1 names.go: AnnotationPoolName,
// AnnotationPoolUID; a test keeps them equal). They are repeated here rather than imported
// so the shim, one process per pod, does not link the Kubernetes API types.
const (
	annotationPoolName = "sandbox-pool.io/pool-name"
	annotationPoolUID  = "sandbox-pool.io/pool-uid"
)

// Spec is the part of an OCI runtime spec (config.json) the shim reads.
type Spec struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ReadSpec reads bundle/config.json.
func ReadSpec(bundle string) (*Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the OCI spec: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(bundle, "config.json"), err)
	}
	return &s, nil
}

// identity is what the agent learns about a container: containerd's IDs and what CRI
// annotated.
func identity(namespace, id string, annotations map[string]string) *v1.Identity {
	a := annotations
	return &v1.Identity{
		Namespace:     namespace,
		ContainerId:   id,
		SandboxId:     a[AnnotationSandboxID],
		Sandbox:       a[annotationContainerType] == containerTypeSandbox,
		ContainerName: a[annotationContainerName],
		PodName:       a[annotationSandboxName],
		PodNamespace:  a[annotationSandboxNamespace],
		PodUid:        a[annotationSandboxUID],
		PoolName:      a[annotationPoolName],
		PoolUid:       a[annotationPoolUID],
	}
}
