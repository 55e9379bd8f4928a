package policy_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/agentcube/sandboxpool/bundles"
	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/policy/policytest"
)

// copyEmbedded writes the embedded bundle, tests included, to a directory.
func copyEmbedded(t *testing.T) string {
	t.Helper()
	files := map[string]string{}
	err := fs.WalkDir(bundles.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(bundles.FS(), path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return policytest.WriteDir(t, files)
}

func assertNoTests(t *testing.T, b *bundle.Bundle) {
	t.Helper()
	if len(b.Modules) == 0 {
		t.Fatal("bundle has no modules")
	}
	for _, m := range b.Modules {
		if strings.HasSuffix(m.Path, "_test.rego") {
			t.Errorf("test module %s loaded into the engine", m.Path)
		}
	}
}

// assertDenies checks that an engine on b denies a status write by another node.
func assertDenies(t *testing.T, b *bundle.Bundle) {
	t.Helper()
	e := policytest.NewEngine(t, policy.WithBundle(b))
	d, err := e.Evaluate(context.Background(), updateStatus(t, kubelet("node-a"), withStatus("node-b"), withStatus("node-b")))
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	if d.Allowed || d.Violations[0].Field != "status" {
		t.Errorf("decision = %+v, want a denial on status", d)
	}
}

func TestLoadEmbedded(t *testing.T) {
	b, err := policy.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	assertNoTests(t, b)
}

func TestLoadBundleDirectory(t *testing.T) {
	b, err := policy.LoadBundle(copyEmbedded(t))
	if err != nil {
		t.Fatal(err)
	}
	assertNoTests(t, b)
	assertDenies(t, b)
}

func TestLoadBundleTarball(t *testing.T) {
	embedded, err := policy.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := bundle.NewWriter(f).Write(*embedded); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := policy.LoadBundle(path)
	if err != nil {
		t.Fatal(err)
	}
	assertNoTests(t, b)
	assertDenies(t, b)
}

// TestPolicyUpdateWithoutRebuild loads a bundle an operator changed on disk.
func TestPolicyUpdateWithoutRebuild(t *testing.T) {
	dir := policytest.WriteDir(t, map[string]string{
		".manifest": `{"roots": ["sandboxpool"], "rego_version": 1}`,
		"sandboxpool/admission/main.rego": `package sandboxpool.admission

deny contains {"field": "metadata.name", "msg": "metadata.name: frozen by the operator"} if input.request.operation == "CREATE"
`,
	})
	b, err := policy.LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := policytest.NewEngine(t, policy.WithBundle(b))
	d, err := e.Evaluate(context.Background(), createClass(t, newClass()))
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Message() != "metadata.name: frozen by the operator" {
		t.Errorf("decision = %+v, want the operator's denial", d)
	}
}

func TestLoadBundleErrors(t *testing.T) {
	notATarball := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := os.WriteFile(notATarball, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"missing":       filepath.Join(t.TempDir(), "nope"),
		"not a tarball": notATarball,
		"syntax error": policytest.WriteDir(t, map[string]string{
			".manifest":            `{"roots": ["sandboxpool"], "rego_version": 1}`,
			"sandboxpool/bad.rego": "package sandboxpool.admission\n\ndeny contains x if {",
		}),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := policy.LoadBundle(path); err == nil {
				t.Error("LoadBundle returned no error")
			}
		})
	}
}

// policyBundle loads a one-file bundle with the given manifest and admission policy.
func policyBundle(t *testing.T, manifest, rego string) *bundle.Bundle {
	t.Helper()
	b, err := policy.LoadBundle(policytest.WriteDir(t, map[string]string{
		".manifest":                       manifest,
		"sandboxpool/admission/main.rego": rego,
	}))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const manifest = `{"roots": ["sandboxpool"], "rego_version": 1}`

func TestNewRejectsBundles(t *testing.T) {
	for name, b := range map[string]*bundle.Bundle{
		"no deny rule":   policyBundle(t, manifest, "package sandboxpool.admission\n\nallow := true\n"),
		"root of data":   policyBundle(t, `{"roots": [""], "rego_version": 1}`, "package sandboxpool.admission\n\ndeny := set()\n"),
		"no roots":       policyBundle(t, `{"rego_version": 1}`, "package sandboxpool.admission\n\ndeny := set()\n"),
		"root elsewhere": policyBundle(t, `{"roots": ["sandboxpool", "config"], "rego_version": 1}`, "package sandboxpool.admission\n\ndeny := set()\n"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := policy.New(context.Background(), policy.WithBundle(b)); err == nil {
				t.Error("New returned no error")
			}
		})
	}
}

// TestEvaluateNeverAllowsOnError checks that a policy that cannot decide yields an error.
func TestEvaluateNeverAllowsOnError(t *testing.T) {
	for name, tt := range map[string]struct {
		rego string
		want error // nil: any error
	}{
		"eval error": {rego: `package sandboxpool.admission

deny contains {"field": "x", "msg": value}

value := input.request.uid

value := input.request.name
`},
		"undefined": {rego: `package sandboxpool.admission

deny := set() if input.request.operation == "DELETE"
`, want: policy.ErrUndefined},
		"not a set": {rego: `package sandboxpool.admission

deny := "no"
`, want: policy.ErrIllTyped},
		"not objects": {rego: `package sandboxpool.admission

deny contains "no"
`, want: policy.ErrIllTyped},
		"no message": {rego: `package sandboxpool.admission

deny contains {"field": "spec"}
`, want: policy.ErrIllTyped},
	} {
		t.Run(name, func(t *testing.T) {
			e := policytest.NewEngine(t, policy.WithBundle(policyBundle(t, manifest, tt.rego)))
			d, err := e.Evaluate(context.Background(), createClass(t, newClass()))
			if err == nil {
				t.Fatalf("Evaluate = %+v, want an error", d)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Evaluate error = %v, want %v", err, tt.want)
			}
			if d.Allowed {
				t.Error("Evaluate allowed on error")
			}
		})
	}
}
