package manifest

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// testSpec is a representative Spec: extended resources and hugepages next to cpu and
// memory, a template with every field the manifest uses.
func testSpec() Spec {
	return Spec{
		PoolName:  "placeholder-node-a",
		PoolUID:   "6c1f3b8e-2d4a-4c5e-9f70-1a2b3c4d5e6f",
		ClassName: "default",
		NodeName:  "node-a",
		Piece:     1,
		Resources: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			"hugepages-2Mi":       resource.MustParse("1Gi"),
			"example.com/gpu":     resource.MustParse("1"),
		},
		Template: v1alpha1.PlaceholderPodTemplate{
			Annotations: map[string]string{"example.com/team": "agents"},
			Tolerations: []corev1.Toleration{
				{Key: "sandbox-pool.io/dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
			RuntimeClassName:  "placeholder",
			Priority:          ptr.To[int32](1000000),
			PriorityClassName: "sandbox-pool",
		},
		Image: "registry.k8s.io/pause:3.10",
	}
}

// mustRender renders s or fails the test.
func mustRender(t testing.TB, s Spec) []byte {
	t.Helper()
	data, err := Render(s)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return data
}

// decodePod decodes rendered bytes into a Pod.
func decodePod(t testing.TB, data []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("decoding the manifest: %v\n%s", err, data)
	}
	return &pod
}

// dirNames lists the names in dir.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// writeRaw writes data to dir/name without Write.
func writeRaw(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
