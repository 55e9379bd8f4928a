package crdgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
)

// goDocWidth is the column the generated field comments wrap at, tabs counted as four.
const goDocWidth = 96

// GoDocs returns src, the Go source of the API types (schema/v1alpha1/types.go), with the
// doc comment of every field of the kinds' types replaced by the field's doc in the CUE
// schema and the field's markers: the same text the CRD's description carries, so the field
// docs are written once, in the CUE files, and markers that say what the generated CRD
// holds for the field (make generate runs it; TestCommittedGoDocsAreUpToDate catches drift).
// The markers are +required or +optional, and the field's default, enum, bounds and list
// type in kubebuilder's words (Markers), read from the field's property in the CRD that
// Generate returns, so the Go types and the CRD agree.
//
// The types are matched to the schema by JSON name, from each kind's Go type (named as the
// kind) down through every field whose type is declared in src; inline embedded structs
// share their parent's CUE value. A field the schema lacks, or one without a doc in it, is
// an error: every field of the API is documented. Types of other packages (metav1,
// corev1) keep their own docs, and types not reached from a kind (the List types) are left
// as written.
func GoDocs(s *schema.Schema, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "types.go", src, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parsing the Go types: %w", err)
	}
	crds, err := Generate(s)
	if err != nil {
		return nil, err
	}
	w := docWalker{structs: map[string]*ast.StructType{}, docs: map[*ast.Field]fieldDoc{}}
	ast.Inspect(file, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok {
			if st, ok := ts.Type.(*ast.StructType); ok {
				w.structs[ts.Name.Name] = st
			}
		}
		return true
	})
	for i, k := range schema.Kinds {
		root := crds[i].Spec.Versions[0].Schema.OpenAPIV3Schema
		if err := w.walk(string(k), s.Lookup(k.Definition()), root, string(k)); err != nil {
			return nil, err
		}
	}
	return w.rewrite(fset, src)
}

// docWalker pairs the Go types with the CUE values they encode.
type docWalker struct {
	structs map[string]*ast.StructType // the struct types declared in the source, by name
	docs    map[*ast.Field]fieldDoc    // the doc and markers each field gets
}

// fieldDoc is the comment a field gets: its doc, then its markers.
type fieldDoc struct {
	text    string
	markers []string
}

// walk assigns the docs of the Go struct type name's fields from v and their markers from
// p, v's schema in the CRD, and recurses into the fields whose types the source declares.
// path names the place for errors.
func (w *docWalker) walk(name string, v cue.Value, p *apiextv1.JSONSchemaProps, path string) error {
	st, ok := w.structs[name]
	if !ok {
		return fmt.Errorf("%s: no Go struct type %s", path, name)
	}
	for _, f := range st.Fields.List {
		jsonName, inline := jsonTag(f)
		if inline {
			if local := w.localType(f.Type); local != "" {
				if err := w.walk(local, v, p, path); err != nil {
					return err
				}
			}
			continue // metav1.TypeMeta: apiVersion and kind are the API server's
		}
		child, ok := structField(v, jsonName)
		if !ok {
			return fmt.Errorf("%s.%s: Go field %s.%s has no field in the CUE schema", path, jsonName, name, f.Names[0].Name)
		}
		d := doc(child)
		if d == "" {
			return fmt.Errorf("%s.%s: the CUE schema has no doc comment for the field", path, jsonName)
		}
		prop, ok := p.Properties[jsonName]
		if !ok {
			return fmt.Errorf("%s.%s: Go field %s.%s has no property in the CRD", path, jsonName, name, f.Names[0].Name)
		}
		fd := fieldDoc{text: d, markers: Markers(prop, slices.Contains(p.Required, jsonName))}
		if prev, seen := w.docs[f]; seen && (prev.text != fd.text || !slices.Equal(prev.markers, fd.markers)) {
			return fmt.Errorf("%s.%s: Go field %s.%s is reached from two CUE fields with different docs or schemas", path, jsonName, name, f.Names[0].Name)
		}
		w.docs[f] = fd
		elem, elemValue, elemProp := w.elem(f.Type, child, &prop)
		if elem != "" {
			if err := w.walk(elem, elemValue, elemProp, path+"."+jsonName); err != nil {
				return err
			}
		}
	}
	return nil
}

// elem is the struct type declared in the source that a field of type t holds (itself,
// behind a pointer, or as a list or map element), with its CUE value and its schema p;
// "" when there is none.
func (w *docWalker) elem(t ast.Expr, v cue.Value, p *apiextv1.JSONSchemaProps) (string, cue.Value, *apiextv1.JSONSchemaProps) {
	switch t := t.(type) {
	case *ast.StarExpr:
		return w.elem(t.X, v, p)
	case *ast.ArrayType:
		if p.Items == nil || p.Items.Schema == nil {
			return "", v, p
		}
		return w.elem(t.Elt, v.LookupPath(cue.MakePath(cue.AnyIndex)), p.Items.Schema)
	case *ast.MapType:
		if p.AdditionalProperties == nil || p.AdditionalProperties.Schema == nil {
			return "", v, p
		}
		return w.elem(t.Value, v.LookupPath(cue.MakePath(cue.AnyString)), p.AdditionalProperties.Schema)
	}
	return w.localType(t), v, p
}

// localType is the name of a struct type the source declares, if t is one.
func (w *docWalker) localType(t ast.Expr) string {
	if id, ok := t.(*ast.Ident); ok {
		if _, declared := w.structs[id.Name]; declared {
			return id.Name
		}
	}
	return ""
}

// jsonTag is a field's JSON name, or inline for an embedded field that has none.
func jsonTag(f *ast.Field) (name string, inline bool) {
	var tag string
	if f.Tag != nil {
		unquoted, err := strconv.Unquote(f.Tag.Value)
		if err == nil {
			tag = reflect.StructTag(unquoted).Get("json")
		}
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" && (len(f.Names) == 0 || slices.Contains(strings.Split(opts, ","), "inline")) {
		return "", true
	}
	if name == "" {
		name = f.Names[0].Name
	}
	return name, false
}

// structField is the field of struct v with the name, whether regular, optional or required.
func structField(v cue.Value, name string) (cue.Value, bool) {
	it, err := v.Fields(cue.Optional(true))
	if err != nil {
		return cue.Value{}, false
	}
	for it.Next() {
		if it.Selector().Unquoted() == name {
			return it.Value(), true
		}
	}
	return cue.Value{}, false
}

// rewrite replaces the doc comment of every field in w.docs, last field first so the
// offsets of the others stay valid, and formats the result. A documented field that
// follows another field gets a blank line before its comment.
func (w *docWalker) rewrite(fset *token.FileSet, src []byte) ([]byte, error) {
	fields := make([]*ast.Field, 0, len(w.docs))
	for f := range w.docs {
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b *ast.Field) int { return int(b.Pos()) - int(a.Pos()) })
	out := bytes.Clone(src)
	for _, f := range fields {
		fieldLine := lineStart(out, fset.Position(f.Pos()).Offset)
		start := fieldLine
		if f.Doc != nil {
			start = lineStart(out, fset.Position(f.Doc.Pos()).Offset)
		}
		indent := string(out[fieldLine:fset.Position(f.Pos()).Offset])
		comment := commentLines(w.docs[f], indent)
		if prev := previousLine(out, start); prev != "" && !strings.HasSuffix(prev, "{") {
			comment = "\n" + comment
		}
		out = slices.Concat(out[:start], []byte(comment), out[fieldLine:])
	}
	formatted, err := format.Source(out)
	if err != nil {
		return nil, fmt.Errorf("formatting the Go types: %w", err)
	}
	return formatted, nil
}

// lineStart is the offset of the start of the line that holds offset.
func lineStart(b []byte, offset int) int {
	return bytes.LastIndexByte(b[:offset], '\n') + 1
}

// previousLine is the line before the one starting at offset, trimmed.
func previousLine(b []byte, offset int) string {
	if offset == 0 {
		return ""
	}
	before := b[:offset-1]
	return strings.TrimSpace(string(before[bytes.LastIndexByte(before, '\n')+1:]))
}

// commentLines renders a doc (paragraphs separated by blank lines) as // lines wrapped at
// goDocWidth, each starting with indent, and then its markers, one a line.
func commentLines(doc fieldDoc, indent string) string {
	width := goDocWidth - len("// ") - 4*strings.Count(indent, "\t") - strings.Count(indent, " ")
	var b strings.Builder
	for i, para := range strings.Split(doc.text, "\n\n") {
		if i > 0 {
			b.WriteString(indent + "//\n")
		}
		line := ""
		for word := range strings.FieldsSeq(para) {
			if line != "" && len(line)+1+len(word) > width {
				b.WriteString(indent + "// " + line + "\n")
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += word
		}
		b.WriteString(indent + "// " + line + "\n")
	}
	for _, m := range doc.markers {
		b.WriteString(indent + "// " + m + "\n")
	}
	return b.String()
}
