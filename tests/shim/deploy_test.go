package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/shim/manager"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// The RuntimeClass is SPEC §2's, and its handler is the one the containerd drop-in
// configures for the placeholder runtime type. (The drop-in itself is what every
// containerd in these tests runs with.)
func TestRuntimeClassMatchesTheContainerdDropIn(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "runtimeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rc nodev1.RuntimeClass
	if err := yaml.UnmarshalStrict(b, &rc); err != nil {
		t.Fatalf("deploy/runtimeclass.yaml: %v", err)
	}
	if rc.APIVersion != "node.k8s.io/v1" || rc.Kind != "RuntimeClass" || rc.Name != "placeholder" || rc.Handler != handlerPlaceholder {
		t.Errorf("RuntimeClass %s/%s %q with handler %q, want node.k8s.io/v1 RuntimeClass placeholder with handler placeholder",
			rc.APIVersion, rc.Kind, rc.Name, rc.Handler)
	}
	if rc.Overhead == nil {
		t.Fatal("RuntimeClass has no overhead")
	}
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "10m", corev1.ResourceMemory: "16Mi"} {
		got := rc.Overhead.PodFixed[name]
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("overhead.podFixed.%s = %s, want %s", name, got.String(), want)
		}
	}
	if len(rc.Overhead.PodFixed) != 2 {
		t.Errorf("overhead.podFixed = %v, want cpu and memory only", rc.Overhead.PodFixed)
	}

	dropIn, err := os.ReadFile(filepath.Join(root, "deploy", "containerd", "placeholder.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"containerd.runtimes." + rc.Handler + "]",
		"runtime_type = '" + manager.RuntimeName + "'",
		"pod_annotations = ['sandbox-pool.io/*']",
	} {
		if !strings.Contains(string(dropIn), want) {
			t.Errorf("deploy/containerd/placeholder.toml does not contain %q", want)
		}
	}
}
