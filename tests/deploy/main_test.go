// Package deploy tests deploy/ the way an operator installs it: `kubectl apply -k` of the
// kustomize base and of its certificate components against a real kube-apiserver (server-side
// validation first), the Deployments' flags against the binaries' own flag sets, and the
// monitoring rules with promtool and against prometheus-operator's CRDs.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentcube/sandboxpool/tests/framework"
)

// MonitoringEnv names the directory with promtool and crds/ (the prometheus-operator CRDs)
// that `make tools` builds; make test sets it.
const MonitoringEnv = "SANDBOXPOOL_MONITORING"

var suite framework.Suite

func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true)))
	os.Exit(framework.Run(m, &suite, nil))
}

// build runs `kubectl kustomize dir` and returns the objects it renders.
func build(t *testing.T, cp *framework.ControlPlane, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := cp.Kubectl(context.Background(), nil, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, stderr)
	}
	objs, err := decode(strings.NewReader(out))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return objs
}

// readManifests returns the objects of the YAML files directly in dir (or of the file dir).
func readManifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// key identifies an object in a build: kind, namespace and name.
func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// find returns the object of kind and name in objs, failing t when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// typed converts u into out (a typed API object).
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
	return out
}

// installTree copies deploy/ into a fresh directory and writes beside it a kustomization
// that composes the base with the given components, as docs/operator-guide.md tells users
// to: <tmp>/install/kustomization.yaml with resources ../deploy. It returns the install
// directory and the copy of deploy/.
func installTree(t *testing.T, root string, components ...string) (install, deployCopy string) {
	t.Helper()
	tmp := t.TempDir()
	deployCopy = filepath.Join(tmp, "deploy")
	src := filepath.Join(root, "deploy")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if rel == filepath.Join("overlays", "self-signed", "certs") {
				return filepath.SkipDir // a developer's own certificates
			}
			return os.MkdirAll(filepath.Join(deployCopy, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(deployCopy, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	install = filepath.Join(tmp, "install")
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../deploy\n"
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			k += "- ../deploy/" + c + "\n"
		}
	}
	if err := os.MkdirAll(install, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(install, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return install, deployCopy
}

// monitoringTools returns the directory of promtool and the prometheus-operator CRDs, or
// skips t (fails it under make test) when it is not there.
func monitoringTools(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(MonitoringEnv)
	why := ""
	switch dir {
	case "":
		why = MonitoringEnv + " is not set: run the tests with `make test`, which builds promtool (make monitoring)"
	default:
		for _, f := range []string{"promtool", "crds/monitoring.coreos.com_prometheusrules.yaml", "crds/monitoring.coreos.com_podmonitors.yaml"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				why = fmt.Sprintf("%s missing in %s=%s: run `make monitoring`", f, MonitoringEnv, dir)
				break
			}
		}
	}
	if why != "" {
		if os.Getenv(framework.RequireToolsEnv) != "" {
			t.Fatalf("monitoring tools required but unavailable: %s", why)
		}
		t.Skip(why)
	}
	return dir
}
