package crdgen

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// TestCommittedGoDocsAreUpToDate fails when a field doc in schema/*.cue changed without
// make generate, or when someone edited a field doc of the Go types by hand.
func TestCommittedGoDocsAreUpToDate(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(root, "schema", "v1alpha1", "types.go")
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	want, err := GoDocs(schema.MustCompiled(), src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, want) {
		t.Errorf("the field docs of %s differ from schema/*.cue: run make generate", name)
	}
}

// TestGoDocsMatchCRDDescriptions: every field of the kinds' Go types carries, as its doc
// comment, exactly the description of its CRD property (the text kubectl explain shows),
// followed by the markers that say what the property holds (+required or +optional,
// bounds, enum, default, list type). The Go types are walked beside the generated CRD
// schemas, by JSON name.
func TestGoDocsMatchCRDDescriptions(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, filepath.Join(root, "schema", "v1alpha1", "types.go"), nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	w := docWalker{structs: map[string]*ast.StructType{}}
	ast.Inspect(file, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				w.structs[ts.Name.Name] = st
			}
		}
		return true
	})
	crds, err := Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	var walk func(typ string, s apiextv1.JSONSchemaProps, path string)
	walk = func(typ string, s apiextv1.JSONSchemaProps, path string) {
		for _, f := range w.structs[typ].Fields.List {
			name, inline := jsonTag(f)
			if inline {
				if local := w.localType(f.Type); local != "" {
					walk(local, s, path)
				}
				continue
			}
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s.%s: no CRD property", path, name)
				continue
			}
			got, markers := commentText(f.Doc)
			if want := Markers(prop, slices.Contains(s.Required, name)); !slices.Equal(markers, want) {
				t.Errorf("%s.%s: Go markers %q, the CRD's %q", path, name, markers, want)
			}
			if path == typ && name == "metadata" {
				continue // the envelope's metadata is the API server's: no description
			}
			checked++
			if got != prop.Description {
				t.Errorf("%s.%s: Go doc %q, CRD description %q", path, name, got, prop.Description)
			}
			if elem := elemType(w, f.Type); elem != "" {
				for prop.Items != nil && prop.Items.Schema != nil {
					prop = *prop.Items.Schema
				}
				walk(elem, prop, path+"."+name)
			}
		}
	}
	for _, crd := range crds {
		walk(crd.Spec.Names.Kind, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, crd.Spec.Names.Kind)
	}
	if checked < 50 {
		t.Fatalf("only %d fields compared", checked)
	}
}

// elemType is the struct type of the source a field holds, directly, behind a pointer or in
// a list.
func elemType(w docWalker, t ast.Expr) string {
	switch t := t.(type) {
	case *ast.StarExpr:
		return elemType(w, t.X)
	case *ast.ArrayType:
		return elemType(w, t.Elt)
	}
	return w.localType(t)
}

// commentText is a doc comment as one text: lines joined by spaces, paragraphs by a blank
// line, as the CRD descriptions are written; and its marker lines (+...), apart.
func commentText(cg *ast.CommentGroup) (text string, markers []string) {
	if cg == nil {
		return "", nil
	}
	var lines []string
	for l := range strings.Lines(cg.Text()) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "+"); ok {
			markers = append(markers, "+"+m)
			continue
		}
		lines = append(lines, l)
	}
	var paras []string
	for p := range strings.SplitSeq(strings.TrimSpace(strings.Join(lines, "")), "\n\n") {
		paras = append(paras, strings.Join(strings.Fields(p), " "))
	}
	return strings.Join(paras, "\n\n"), markers
}

const docSrc = `package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SandboxPoolClass is hand-written: type docs stay.
type SandboxPoolClass struct {
	metav1.TypeMeta   ` + "`json:\",inline\"`" + `
	metav1.ObjectMeta ` + "`json:\"metadata,omitempty\"`" + `
	// A stale doc that make generate replaces.
	Spec   SandboxPoolClassSpec   ` + "`json:\"spec\"`" + `
	Status SandboxPoolClassStatus ` + "`json:\"status,omitzero\"`" + `
}

type SandboxPoolClassSpec struct {
	Selector       metav1.LabelSelector   ` + "`json:\"selector\"`" + `
	ResourcePolicy ResourcePolicy         ` + "`json:\"resourcePolicy\"`" + `
	PlaceholderPod PlaceholderPodTemplate ` + "`json:\"placeholderPod,omitzero\"`" + `
}

type ResourcePolicy struct {
	Resources map[string]string ` + "`json:\"resources\"`" + `
}

type PlaceholderPodTemplate struct {
	RuntimeClassName string ` + "`json:\"runtimeClassName,omitempty\"`" + `
}

type SandboxPoolClassStatus struct {
	ReadySandboxPools int32 ` + "`json:\"readySandboxPools\"`" + `
}

type SandboxPool struct {
	Spec SandboxPoolSpec ` + "`json:\"spec\"`" + `
}

type SandboxPoolSpec struct {
	NodeName string ` + "`json:\"nodeName\"`" + `
}
`

// TestGoDocs: the generator writes each field's CUE doc over what was there, wrapped, with a
// blank line between documented fields, leaves type docs and embedded fields alone, and is
// idempotent.
func TestGoDocs(t *testing.T) {
	s := schema.MustCompiled()
	out, err := GoDocs(s, []byte(docSrc))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"// SandboxPoolClass is hand-written: type docs stay.\n",
		"\tmetav1.TypeMeta `json:\",inline\"`\n\n\t// metadata is the standard object metadata.\n\t// +optional\n\tmetav1.ObjectMeta",
		"\t// spec is the desired state of the class.\n\t// +required\n\tSpec SandboxPoolClassSpec",
		"\n\n\t// status is observed by the controller. Absent until the controller writes it, and never\n\t// empty.\n\t// +optional\n\t// +kubebuilder:validation:MinProperties=1\n\tStatus SandboxPoolClassStatus",
		"\t// +optional\n\t// +kubebuilder:default=\"placeholder\"\n\t// +kubebuilder:validation:MinLength=1\n\t// +kubebuilder:validation:MaxLength=253\n\tRuntimeClassName string",
		"\t// selector picks the nodes that get a pool. Immutable: changing it would mass-delete and\n\t// mass-create pools.",
		"\t// runtimeClassName of the placeholder pod.",
		"\t// resources is the per-node quota",
		"\t// nodeName is the node this pool reserves capacity on.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "A stale doc") {
		t.Errorf("the stale doc survived:\n%s", got)
	}
	again, err := GoDocs(s, out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, out) {
		t.Errorf("a second run changed the file:\n%s", again)
	}
}

// TestGoDocsRefusesUnknownField: a Go field the schema does not have is an error, not a
// field left undocumented.
func TestGoDocsRefusesUnknownField(t *testing.T) {
	src := strings.Replace(docSrc, "NodeName string", "Extra string `json:\"extra\"`\n\tNodeName string", 1)
	_, err := GoDocs(schema.MustCompiled(), []byte(src))
	if err == nil || !strings.Contains(err.Error(), "SandboxPool.spec.extra") {
		t.Fatalf("want an error naming SandboxPool.spec.extra, got %v", err)
	}
}

// TestKindMarkersMatchCRD: the kinds' hand-written type markers say what their generated
// CRDs are: a root object, cluster-scoped, with the status subresource (kube-api-linter's
// statussubresource checks the Go side against the marker).
func TestKindMarkersMatchCRD(t *testing.T) {
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "schema", "v1alpha1", "types.go"), nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	// A type's markers are the comments between the declaration before it and its own (the
	// marker block stands apart from the type's doc comment).
	docs := map[string]string{}
	prevEnd := file.Name.End()
	for _, d := range file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && len(g.Specs) == 1 {
			if ts, ok := g.Specs[0].(*ast.TypeSpec); ok {
				for _, cg := range file.Comments {
					if cg.Pos() > prevEnd && cg.End() < ts.Pos() {
						docs[ts.Name.Name] += cg.Text()
					}
				}
			}
		}
		prevEnd = d.End()
	}
	crds, err := Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		kind := crd.Spec.Names.Kind
		want := map[string]bool{
			"+kubebuilder:object:root=true":       true,
			"+kubebuilder:resource:scope=Cluster": crd.Spec.Scope == apiextv1.ClusterScoped,
			"+kubebuilder:subresource:status":     crd.Spec.Versions[0].Subresources != nil && crd.Spec.Versions[0].Subresources.Status != nil,
		}
		for m, has := range want {
			if strings.Contains(docs[kind], m+"\n") != has {
				t.Errorf("%s: marker %s on the Go type: %v, the CRD says %v", kind, m, !has, has)
			}
		}
	}
}
