// Package corpus holds the objects every layer of the project is tested with: the valid
// examples users start from (examples/), golden objects with a full status, and invalid
// objects, each with the rule it breaks and the message it must produce. The schema tests,
// the cue CLI check, the API server tests and the admission tests all read them from here.
package corpus

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

//go:embed invalid/*.yaml golden/*.yaml
var files embed.FS

// Object is one corpus file.
type Object struct {
	Name string // file name, e.g. "01-class-missing-memory.yaml"
	YAML []byte
	JSON []byte
	Kind string // the kind field of the object

	// As is the kind whose schema the object is checked against; Kind unless the file
	// says "# as: KIND" (an object of the wrong kind).
	As string
	// Errors are the field errors the schema must report, in order, one "# error: ..." line
	// each: the field, its value and what is allowed, as the API server words them.
	Errors []string
	// Error is the first of Errors.
	Error string
	// CUE is what the cue CLI prints about the object ("# cue: ...", its paths written as
	// ours): the rule in the schema's words where it has some.
	CUE string
	// APIServer is the message the API server must answer ("# apiserver: ..."), or empty
	// when the file names the gap instead ("# apiserver-gap: ...").
	APIServer string
	// APIServerGap says why the CRD alone cannot reject the object ("# apiserver-gap: ...");
	// the admission webhook does, with the message Webhook ("# webhook: ...").
	APIServerGap string
	Webhook      string
	// Status is true when the invalid part is in status, so it is written through the
	// status subresource ("# apply: status").
	Status bool
}

// Invalid returns the invalid objects, sorted by name.
func Invalid() ([]Object, error) { return readDir(files, "invalid") }

// Golden returns the golden objects (valid, with a full status), sorted by name.
func Golden() ([]Object, error) { return readDir(files, "golden") }

// Examples returns the objects in the repository's examples/ directory.
func Examples() ([]Object, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return readDir(os.DirFS(root), "examples")
}

// Valid returns every valid object: the examples, then the golden objects.
func Valid() ([]Object, error) {
	ex, err := Examples()
	if err != nil {
		return nil, err
	}
	golden, err := Golden()
	if err != nil {
		return nil, err
	}
	return append(ex, golden...), nil
}

// Find returns the valid object (example or golden) with the file name.
func Find(name string) (Object, error) {
	objs, err := Valid()
	if err != nil {
		return Object{}, err
	}
	for _, o := range objs {
		if o.Name == name {
			return o, nil
		}
	}
	return Object{}, fmt.Errorf("no example or golden object %s", name)
}

// RepoRoot is the repository root, found from this source file (tests run in a checkout).
func RepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if isRepoRoot(root) {
			return root, nil
		}
	}
	// A binary built with -trimpath (the demo) has module-relative source paths: look up
	// from the working directory instead.
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRepoRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root (the go.mod of %s) not found from the source path or the working directory", modulePath)
		}
		dir = parent
	}
}

// modulePath is the module whose go.mod marks the repository root.
const modulePath = "github.com/agentcube/sandboxpool"

func isRepoRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module "+modulePath
}

func readDir(fsys fs.FS, dir string) ([]Object, error) {
	names, err := fs.Glob(fsys, dir+"/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Object
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		o, err := parse(filepath.Base(n), b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func parse(name string, b []byte) (Object, error) {
	o := Object{Name: name, YAML: b}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		key, val, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "error":
			o.Errors = append(o.Errors, val)
			if o.Error == "" {
				o.Error = val
			}
		case "cue":
			o.CUE = val
		case "as":
			o.As = val
		case "apiserver":
			o.APIServer = val
		case "apiserver-gap":
			o.APIServerGap = val
		case "webhook":
			o.Webhook = val
		case "apply":
			o.Status = val == "status"
		}
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return o, err
	}
	o.JSON = j
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		return o, err
	}
	o.Kind = meta.Kind
	if o.As == "" {
		o.As = o.Kind
	}
	return o, nil
}
