package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

var (
	poolsGVR = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools}
)

func dyn(t *testing.T) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(requireCluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs kubectl and fails the test on error.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, stderr, err := kubectlErr(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func kubectlErr(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var in *strings.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	if in == nil {
		return requireCluster(t).Kubectl(context.Background(), nil, args...)
	}
	return requireCluster(t).Kubectl(context.Background(), in, args...)
}

func fromYAML(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// poolYAML is a valid pool for a node, of a class.
func poolYAML(node, class string) string {
	return `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPool
metadata:
  name: placeholder-` + node + `
spec:
  classRef: {name: ` + class + `}
  nodeName: ` + node + `
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
`
}

// classYAML is a valid class.
func classYAML(name string) string {
	return `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPoolClass
metadata:
  name: ` + name + `
spec:
  selector: {matchLabels: {sandbox.agentcube.io/pool: ` + name + `}}
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
`
}
