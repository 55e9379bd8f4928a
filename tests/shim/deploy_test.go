package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/shim/manager"
)

// The RuntimeClass is docs/design.md §2's, and its handler is the one the containerd drop-in
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
	// No overhead: kubelet admits the static pod from its file, which has none, so an
	// overhead would make the scheduler count more than kubelet locks.
	if rc.Overhead != nil {
		t.Errorf("RuntimeClass overhead %v, want none (the placeholder has no pod cgroup)", rc.Overhead.PodFixed)
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
