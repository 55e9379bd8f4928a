package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"cuelang.org/go/cue"
)

// Attribute is the CUE attribute that carries what OpenAPI and CEL need beyond the CUE
// constraints (listType, listMapKeys, immutable, rule; see sandboxpool.cue). The CRD
// generator reads all of it; this package reads immutable.
const Attribute = "crd"

// ImmutableFields lists the fields of the kind that the schema marks @crd(immutable),
// dotted (spec.classRef.name), sorted. The CRD generator turns each into a CEL rule
// (self == oldSelf) that the API server checks on every update.
func (s *Schema) ImmutableFields(kind Kind) []string { return slices.Clone(s.immutable[kind]) }

// immutableFields reads ImmutableFields from a kind's definition.
func immutableFields(def cue.Value) []string {
	var out []string
	for _, p := range immutablePaths(def, nil, nil) {
		out = append(out, strings.Join(p, "."))
	}
	slices.Sort(out)
	return out
}

// immutablePaths appends to out the paths of the fields below v marked @crd(immutable).
func immutablePaths(v cue.Value, path []string, out [][]string) [][]string {
	it, err := v.Fields(cue.Optional(true))
	if err != nil {
		return out
	}
	for it.Next() {
		p := append(slices.Clone(path), it.Selector().Unquoted())
		child := it.Value()
		if a := child.Attribute(Attribute); a.Err() == nil {
			if ok, _ := a.Flag(0, "immutable"); ok {
				out = append(out, p)
				continue
			}
		}
		if KindOf(child) == cue.StructKind {
			out = immutablePaths(child, p, out)
		}
	}
	return out
}

// ValidateTransition checks an update of old to obj, both JSON objects of the kind, against
// the schema's immutable fields: the rule the CRD's CEL holds in the API server, for checks
// made without one (sandboxpool vet --old). A *ValidationError names each field that changed.
func (s *Schema) ValidateTransition(kind Kind, old, obj []byte) error {
	var o, n map[string]any
	if err := json.Unmarshal(old, &o); err != nil {
		return fmt.Errorf("reading the old %s: %w", kind, err)
	}
	if err := json.Unmarshal(obj, &n); err != nil {
		return fmt.Errorf("reading the %s: %w", kind, err)
	}
	ve := &ValidationError{Kind: kind}
	for _, f := range s.immutable[kind] {
		sels := strings.Split(f, ".")
		if !reflect.DeepEqual(lookup(o, sels), lookup(n, sels)) {
			ve.Fields = append(ve.Fields, FieldError{Path: f, Msg: "field is immutable"})
		}
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}

// lookup is the value at the path in a decoded JSON object, nil when there is none.
func lookup(v any, sels []string) any {
	for _, sel := range sels {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[sel]
	}
	return v
}
