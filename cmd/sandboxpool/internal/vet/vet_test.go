package vet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema/corpus"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExamplesPass(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	code, out, errs := run(t, files...)
	if code != ExitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errs)
	}
	if n := strings.Count(out, ": ok\n"); n != len(files) {
		t.Errorf("want %d ok lines:\n%s", len(files), out)
	}
}

// TestInvalidCorpus: every invalid object fails with exit 1 and exactly its recorded
// messages, one line per bad field naming the field, its value and what is allowed, as the
// API server words them (an enum once, not once per allowed value).
func TestInvalidCorpus(t *testing.T) {
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			f := writeFile(t, o.Name, string(o.YAML))
			code, out, errs := run(t, f)
			if code != ExitViolation {
				t.Fatalf("exit %d, want %d:\n%s%s", code, ExitViolation, out, errs)
			}
			if o.As != o.Kind {
				// vet, like the API server, checks an object as the kind it declares.
				if !strings.Contains(out, "Forbidden: field not declared in the schema") {
					t.Errorf("a %s checked as %s should have fields not declared:\n%s", o.As, o.Kind, out)
				}
				return
			}
			var want strings.Builder
			for _, e := range o.Errors {
				fmt.Fprintf(&want, "%s: %s/%s: %s\n", f, o.Kind, name(t, o.JSON), e)
			}
			if out != want.String() {
				t.Errorf("output:\n%swant:\n%s", out, want.String())
			}
		})
	}
}

// name is an object's metadata.name.
func name(t *testing.T, obj []byte) string {
	t.Helper()
	var o struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj, &o); err != nil {
		t.Fatal(err)
	}
	return o.Metadata.Name
}

const class = `apiVersion: sandboxpool.agentcube.volcano.sh/v1alpha1
kind: SandboxPoolClass
metadata: {name: c}
spec:
  selector: {matchLabels: {pool: a}}
  resourcePolicy: {resources: {cpu: "2", memory: 4Gi}}
`

func TestUpdateWithOld(t *testing.T) {
	old := writeFile(t, "old.yaml", class)
	changed := writeFile(t, "new.yaml", strings.Replace(class, "pool: a", "pool: b", 1))
	code, out, _ := run(t, "--old", old, changed)
	if code != ExitViolation || !strings.Contains(out, "spec.selector") || !strings.Contains(out, "immutable") {
		t.Errorf("selector change: exit %d\n%s", code, out)
	}
	same := writeFile(t, "same.yaml", class)
	if code, out, _ := run(t, "--old", old, same); code != ExitOK {
		t.Errorf("unchanged update: exit %d\n%s", code, out)
	}
}

func TestMultiDocumentFileReportsEachObject(t *testing.T) {
	bad := strings.Replace(strings.Replace(class, "name: c", "name: d", 1), `cpu: "2"`, `cpu: "0"`, 1)
	f := writeFile(t, "two.yaml", "# a comment\n"+class+"---\n"+bad)
	code, out, _ := run(t, f)
	if code != ExitViolation {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(out, "SandboxPoolClass/c: ok") || !strings.Contains(out, `SandboxPoolClass/d: spec.resourcePolicy.resources.cpu: Invalid value: "0": must be a quantity greater than zero`) {
		t.Errorf("output:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--no-such-flag", "x.yaml"},
		{"/does/not/exist.yaml"},
		{"--subresource", "status", "x.yaml"},
		{writeFile(t, "empty.yaml", "# nothing\n")},
	} {
		if code, out, errs := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d\n%s%s", args, code, ExitUsage, out, errs)
		}
	}
}
