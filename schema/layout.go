package schema

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
)

// A layout says which parts of an object of a kind CUE can evaluate on their own, so that
// Default and ValidateUpdate evaluate (and cache) them apart: what did not change is then
// not evaluated again. It is read from the CUE sources once, conservatively: a split is
// used only when the sources show that no constraint reaches across it, and any construct
// the check does not understand keeps the pieces together.
//
//   - The status is apart when the kind's definition constrains it by one field whose value
//     names none of its siblings, and nothing else in the definition names "status". The
//     rest of the object (apiVersion, kind, metadata, spec) is then evaluated without it.
//   - The status's members are apart when the status's definition is a struct of plain,
//     optional fields (no comprehension, embedding, pattern, ellipsis, alias, regular or
//     required field) none of whose values names a sibling: each member is then evaluated
//     against its own schema.
//   - A metadata member is outside the schema when the metadata's schema is open and has
//     no pattern constraint, and the member's name appears nowhere in the sources (as an
//     identifier, label or string). Such members (resourceVersion, uid, managedFields...)
//     are constrained by nothing, so they are left out of the evaluation and copied to its
//     result as they are.
type layout struct {
	statusApart bool
	// statusMembers are the status's members that may be evaluated apart; nil when the
	// members are not apart.
	statusMembers map[string]bool
	// metadataOpen is true when the metadata's schema is open and has no patterns.
	metadataOpen bool
	// words are every identifier, label and string literal of the sources.
	words map[string]bool
}

// outsideSchema reports whether the metadata member name is constrained by nothing.
func (l *layout) outsideSchema(name string) bool {
	return l.metadataOpen && !l.words[name]
}

// sources are the parsed CUE files and the package-level declarations by label.
type sources struct {
	files []*ast.File
	decls map[string][]*ast.Field
	words map[string]bool
}

func parseSources(srcs map[string][]byte) (*sources, error) {
	s := &sources{decls: map[string][]*ast.Field{}, words: map[string]bool{}}
	names := make([]string, 0, len(srcs))
	for name := range srcs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if path.Ext(name) != ".cue" {
			continue
		}
		f, err := parser.ParseFile(name, srcs[name])
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		s.files = append(s.files, f)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.Field); ok {
				if l, ok := labelName(fd.Label); ok {
					s.decls[l] = append(s.decls[l], fd)
				}
			}
		}
		ast.Walk(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				s.words[n.Name] = true
			case *ast.BasicLit:
				if u, err := strconv.Unquote(n.Value); err == nil {
					s.words[u] = true
				} else {
					s.words[n.Value] = true
				}
			}
			return true
		}, nil)
	}
	return s, nil
}

// layoutOf reads the layout of kind from the sources and the compiled definition def.
func layoutOf(src *sources, kind Kind, parts map[Part]cue.Value) layout {
	l := layout{words: src.words}
	if meta := parts[PartMetadata]; meta.Allows(cue.Str("x-sandboxpool-undeclared")) {
		l.metadataOpen = true
		it, err := meta.Fields(cue.Patterns(true), cue.Optional(true))
		if err != nil {
			l.metadataOpen = false
		}
		for err == nil && it.Next() {
			if it.Selector().ConstraintType() == cue.PatternConstraint {
				l.metadataOpen = false
			}
		}
	}
	top := src.single(kind.Definition())
	if top == nil {
		return l
	}
	status := topField(top, string(PartStatus))
	if status == nil || names(status.Value, labels(top)) {
		return l
	}
	for _, e := range top.Elts {
		if e == status {
			continue
		}
		switch e.(type) {
		case *ast.EmbedDecl, *ast.Ellipsis:
			return l
		}
		if mentions(e, string(PartStatus)) {
			return l
		}
	}
	l.statusApart = true

	st, ok := status.Value.(*ast.StructLit)
	if id, isIdent := status.Value.(*ast.Ident); isIdent {
		st, ok = src.single(id.Name), true
	}
	if !ok || st == nil {
		return l
	}
	members := map[string]bool{}
	for _, e := range st.Elts {
		switch e := e.(type) {
		case *ast.Attribute, *ast.CommentGroup:
		case *ast.Field:
			name, simple := labelName(e.Label)
			if !simple || e.Alias != nil || e.Constraint != token.OPTION || strings.HasPrefix(name, "#") || strings.HasPrefix(name, "_") {
				return l
			}
			members[name] = true
		default:
			return l
		}
	}
	for _, e := range st.Elts {
		if f, ok := e.(*ast.Field); ok && names(f.Value, members) {
			return l
		}
	}
	l.statusMembers = members
	return l
}

// single is the struct of the package-level declaration label, when it is declared once
// and as a struct literal.
func (s *sources) single(label string) *ast.StructLit {
	if len(s.decls[label]) != 1 {
		return nil
	}
	st, _ := s.decls[label][0].Value.(*ast.StructLit)
	return st
}

// topField is the one field of st labelled name; nil when there is none or more than one.
func topField(st *ast.StructLit, name string) *ast.Field {
	var found *ast.Field
	for _, e := range st.Elts {
		f, ok := e.(*ast.Field)
		if !ok {
			continue
		}
		if l, ok := labelName(f.Label); ok && l == name {
			if found != nil {
				return nil
			}
			found = f
		}
	}
	return found
}

// labels are the names of st's fields.
func labels(st *ast.StructLit) map[string]bool {
	out := map[string]bool{}
	for _, e := range st.Elts {
		if f, ok := e.(*ast.Field); ok {
			if l, ok := labelName(f.Label); ok {
				out[l] = true
			}
		}
	}
	return out
}

// names reports whether an identifier in n, other than a label, is one of names.
func names(n ast.Node, names map[string]bool) bool {
	found := false
	var visit func(ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if _, plain := labelName(n.Label); !plain {
				ast.Walk(n.Label, visit, nil)
			}
			ast.Walk(n.Value, visit, nil)
			return false
		case *ast.Ident:
			found = found || names[n.Name]
		}
		return !found
	}
	ast.Walk(n, visit, nil)
	return found
}

// mentions reports whether n holds name as an identifier, a label or a string.
func mentions(n ast.Node, name string) bool {
	found := false
	ast.Walk(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			found = found || n.Name == name
		case *ast.BasicLit:
			u, err := strconv.Unquote(n.Value)
			found = found || (err == nil && u == name) || n.Value == name
		}
		return !found
	}, nil)
	return found
}

// labelName is the name of a plain label (an identifier or a string); ok is false for
// patterns, interpolations and aliases.
func labelName(l ast.Label) (string, bool) {
	switch l := l.(type) {
	case *ast.Ident:
		return l.Name, true
	case *ast.BasicLit:
		u, err := strconv.Unquote(l.Value)
		return u, err == nil
	}
	return "", false
}

// memberSchemas are the schemas of the status's members that are apart.
func memberSchemas(status cue.Value, members map[string]bool) (map[string]cue.Value, error) {
	out := map[string]cue.Value{}
	for _, m := range slices.Sorted(maps.Keys(members)) {
		v := status.LookupPath(cue.MakePath(cue.Str(m).Optional()))
		if !v.Exists() {
			return nil, fmt.Errorf("status member %s not found", m)
		}
		out[m] = v
	}
	return out, nil
}
