package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	cuejson "cuelang.org/go/encoding/json"

	"github.com/agentcube/sandboxpool/schema/jsonraw"
)

// Part is a top-level member of an object that the API server lets an update change on
// its own: a write of the status subresource changes only the status, a write of the main
// resource only metadata and spec (the API server keeps the stored status).
type Part string

// The parts of an object, in the order they are reported.
const (
	PartMetadata Part = "metadata"
	PartSpec     Part = "spec"
	PartStatus   Part = "status"
)

// Parts lists every part.
var Parts = []Part{PartMetadata, PartSpec, PartStatus}

// Attribute is the CUE attribute that carries what OpenAPI and CEL need beyond the CUE
// constraints (listType, listMapKeys, immutable, rule; see sandboxpool.cue). The CRD
// generator reads all of it; this package reads the map-list keys.
const Attribute = "crd"

// serverMetadata are the metadata fields the API server itself writes on an update: a
// difference in them alone is no change of the object's metadata.
var serverMetadata = []string{"managedFields", "resourceVersion", "generation"}

// requiredMissing is CUE's message for a required field that is absent. Such a violation is
// about the struct that lacks the field (the API server puts "required" on the parent's
// schema too), so it is ratcheted by that struct's value.
const requiredMissing = "field is required but not present"

// ValidateUpdate validates obj, an update of old (both JSON objects of the kind), the way
// the API server validates an update of a custom resource (CRD validation ratcheting):
//
//   - only the parts that changed are validated: a spec change validates the whole object
//     (the spec's rules reach into metadata), a status or metadata change validates that
//     part, and within a status or metadata only the members that changed and those the
//     schema requires;
//   - a violation is ignored when the value it is about is the same in old: an object
//     stored under older, looser rules stays writable where the write itself is valid. A
//     missing required field is about the struct that lacks it; elements of map lists (the
//     conditions, keyed by type) are matched by their keys, other list elements by index.
//
// An update that changes nothing is valid. A *ValidationError names each violation left.
func (s *Schema) ValidateUpdate(kind Kind, old, obj []byte) error {
	if !slices.Contains(Kinds, kind) {
		return fmt.Errorf("unknown kind %q", kind)
	}
	if s.statusMembersValid(kind, old, obj) {
		return nil
	}
	var o, n map[string]any
	if err := json.Unmarshal(old, &o); err != nil {
		return &ValidationError{Kind: kind, Fields: []FieldError{{Msg: "old object is not a JSON object: " + err.Error()}}}
	}
	if err := json.Unmarshal(obj, &n); err != nil {
		return &ValidationError{Kind: kind, Fields: []FieldError{{Msg: "not a JSON object: " + err.Error()}}}
	}
	changed := ChangedParts(o, n)
	whole := slices.Contains(changed, PartSpec) || o["apiVersion"] != n["apiVersion"] || o["kind"] != n["kind"]
	if len(changed) == 0 && !whole {
		return nil
	}

	e, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release(e)
	var found []violation
	if whole {
		expr, err := cuejson.Extract(string(kind)+".json", obj)
		if err != nil {
			return &ValidationError{Kind: kind, Fields: []FieldError{{Msg: "not a JSON object: " + err.Error()}}}
		}
		found = check(e.defs[kind].Unify(e.ctx.BuildExpr(expr)))
	} else {
		for _, p := range changed {
			vs, err := e.validatePart(kind, p, reducedPart(e.required[kind][p], asMap(o[string(p)]), n[string(p)]))
			if err != nil {
				return err
			}
			found = append(found, vs...)
		}
	}
	var kept []violation
	for _, v := range found {
		if !s.ratcheted(kind, v, o, n) {
			kept = append(kept, v)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return s.validationError(kind, kept, obj)
}

// ChangedParts lists the parts whose values differ between two objects, ignoring the
// metadata the API server writes itself (serverMetadata).
func ChangedParts(old, obj map[string]any) []Part {
	var out []Part
	for _, p := range Parts {
		a, b := old[string(p)], obj[string(p)]
		if p == PartMetadata {
			a, b = withoutKeys(a, serverMetadata), withoutKeys(b, serverMetadata)
		}
		if !reflect.DeepEqual(a, b) {
			out = append(out, p)
		}
	}
	return out
}

// validatePart validates value as the part of an object of the kind.
func (e *evaluator) validatePart(kind Kind, p Part, value any) ([]violation, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", p, err)
	}
	expr, err := cuejson.Extract(string(p)+".json", raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return check(e.parts[kind][p].Unify(e.ctx.BuildExpr(expr))), nil
}

// check lists every violation of v: CUE's Validate, plus each required field that is
// missing. Validate leaves a missing field out when it reports another error (CUE files
// "required" under incomplete values, which an error outranks); an update must see it
// anyway, because the other error may be one that ratcheting drops.
func check(v cue.Value) []violation {
	found := violationsOf(v.Validate(cue.Concrete(true), cue.Final()))
	for _, m := range missingRequired(v, nil) {
		if !slices.ContainsFunc(found, func(f violation) bool { return slices.Equal(f.path, m.path) && f.msg == m.msg }) {
			found = append(found, m)
		}
	}
	return found
}

// missingRequired lists the required fields (name!) that v and the values below it lack.
func missingRequired(v cue.Value, out []violation) []violation {
	kind := v.IncompleteKind()
	if kind == cue.BottomKind {
		// A struct holding an error reports no kind but its own; its fields are still there.
		kind = cue.StructKind
	}
	switch kind &^ cue.BottomKind {
	case cue.StructKind:
		it, err := v.Fields(cue.Optional(true))
		if err != nil {
			return out
		}
		for it.Next() {
			switch it.Selector().ConstraintType() {
			case cue.RequiredConstraint:
				out = append(out, violation{path: pathOf(it.Value()), msg: requiredMissing})
			case cue.OptionalConstraint:
			default:
				out = missingRequired(it.Value(), out)
			}
		}
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return out
		}
		for it.Next() {
			out = missingRequired(it.Value(), out)
		}
	}
	return out
}

// pathOf is the path of v as CUE error paths spell it.
func pathOf(v cue.Value) []string {
	sels := v.Path().Selectors()
	out := make([]string, len(sels))
	for i, s := range sels {
		out[i] = strings.TrimSuffix(strings.TrimSuffix(s.String(), "!"), "?")
	}
	return out
}

// reducedPart is the new value of a part with the members left out that did not change and
// that the schema does not require: they were valid when written, and a struct whose other
// members are optional is valid without them. A part that is not an object is returned as
// it is, for the schema to reject.
func reducedPart(required []string, old map[string]any, value any) any {
	m, ok := value.(map[string]any)
	if !ok {
		return value
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if slices.Contains(required, k) {
			out[k] = v
			continue
		}
		if ov, found := old[k]; found && reflect.DeepEqual(ov, v) {
			continue
		}
		out[k] = v
	}
	return out
}

// ratcheted reports whether the violation is about a value that old already had.
func (s *Schema) ratcheted(kind Kind, v violation, old, obj map[string]any) bool {
	sels := selectors(v.path)
	if len(sels) == 0 {
		return false
	}
	if v.msg == requiredMissing {
		sels = sels[:len(sels)-1]
	}
	ov, nv, ok := s.correlate(kind, sels, old, obj)
	return ok && reflect.DeepEqual(ov, nv)
}

// correlate walks the same path in old and obj and returns the values found there (nil for
// an absent one). Elements of a map list are found in old by their keys, as the API server
// correlates them; ok is false when the path cannot be followed in obj.
func (s *Schema) correlate(kind Kind, sels []string, old, obj any) (ov, nv any, ok bool) {
	var shape []string // the path without list indexes, to find map lists
	for _, sel := range sels {
		switch n := obj.(type) {
		case map[string]any:
			obj = n[sel]
			if o, isMap := old.(map[string]any); isMap {
				old = o[sel]
			} else {
				old = nil
			}
			shape = append(shape, sel)
		case []any:
			i, err := strconv.Atoi(sel)
			if err != nil || i < 0 || i >= len(n) {
				return nil, nil, false
			}
			obj = n[i]
			old = correlateElement(old, obj, i, s.mapListKeys[kind][strings.Join(shape, ".")])
		default:
			return nil, nil, false
		}
	}
	return old, obj, true
}

// correlateElement is the element of the old list that corresponds to elem, the i-th of
// the new list: the one with the same values of keys in a map list, the i-th otherwise.
func correlateElement(old, elem any, i int, keys []string) any {
	list, ok := old.([]any)
	if !ok {
		return nil
	}
	if len(keys) == 0 {
		if i < len(list) {
			return list[i]
		}
		return nil
	}
	want, ok := elem.(map[string]any)
	if !ok {
		return nil
	}
	for _, candidate := range list {
		c, ok := candidate.(map[string]any)
		if ok && slices.IndexFunc(keys, func(k string) bool { return !reflect.DeepEqual(c[k], want[k]) }) < 0 {
			return candidate
		}
	}
	return nil
}

// selectors are the field names and list indexes of a CUE error path, without the
// definition it starts at and with quoted labels unquoted.
func selectors(path []string) []string {
	out := make([]string, 0, len(path))
	for _, s := range path {
		if strings.HasPrefix(s, "#") {
			continue
		}
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
		out = append(out, s)
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func withoutKeys(v any, keys []string) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		if !slices.Contains(keys, k) {
			out[k] = val
		}
	}
	return out
}

// partsOf looks up the schema of each part of a kind's definition, and the members of each
// part that are not optional.
func partsOf(def cue.Value) (map[Part]cue.Value, map[Part][]string, error) {
	parts, required := map[Part]cue.Value{}, map[Part][]string{}
	for _, p := range Parts {
		var v cue.Value
		for _, sel := range []cue.Selector{cue.Str(string(p)), cue.Str(string(p)).Optional(), cue.Str(string(p)).Required()} {
			if v = def.LookupPath(cue.MakePath(sel)); v.Exists() {
				break
			}
		}
		if !v.Exists() {
			return nil, nil, fmt.Errorf("no %s in %v", p, def.Path())
		}
		parts[p] = v
		it, err := v.Fields(cue.Optional(true))
		if err != nil {
			return nil, nil, fmt.Errorf("%v.%s: %w", def.Path(), p, err)
		}
		for it.Next() {
			if it.Selector().ConstraintType() != cue.OptionalConstraint {
				required[p] = append(required[p], it.Selector().Unquoted())
			}
		}
	}
	return parts, required, nil
}

// mapLists finds the map lists of a definition (@crd(listType=map,listMapKeys=...)): their
// paths without list indexes ("status.conditions") and their keys.
func mapLists(v cue.Value, path []string, out map[string][]string, depth int) {
	if depth > 32 { // the schema is not recursive; this only bounds a mistake
		return
	}
	if a := v.Attribute(Attribute); a.Err() == nil {
		if lt, ok, _ := a.Lookup(0, "listType"); ok && lt == "map" {
			if keys, ok, _ := a.Lookup(0, "listMapKeys"); ok {
				out[strings.Join(path, ".")] = strings.Split(keys, "|")
			}
		}
	}
	switch v.IncompleteKind() &^ cue.BottomKind {
	case cue.StructKind:
		it, err := v.Fields(cue.Optional(true))
		if err != nil {
			return
		}
		for it.Next() {
			mapLists(it.Value(), append(slices.Clone(path), it.Selector().Unquoted()), out, depth+1)
		}
	case cue.ListKind:
		mapLists(v.LookupPath(cue.MakePath(cue.AnyIndex)), path, out, depth+1)
	}
}

// statusMembersValid is the common update's fast path: it reports true when obj differs
// from old in nothing but the metadata the API server writes and members of the status
// that the layout evaluates apart (a status write), and every changed member is valid on
// its own (each checked against its schema, the result cached by its content). Anything
// else (a spec or metadata change, a violation, JSON it does not split) returns false,
// and ValidateUpdate decides the update the long way, which gives the same answer for
// the updates this one accepts.
func (s *Schema) statusMembersValid(kind Kind, old, obj []byte) bool {
	l := s.layouts[kind]
	if l.statusMembers == nil || !jsonraw.Valid(old) || !jsonraw.Valid(obj) {
		return false
	}
	oldBy, n, ok := memberPair(old, obj)
	if !ok || len(oldBy) != len(n) {
		return false
	}
	var oldStatus, newStatus []byte
	for _, m := range n {
		ov, found := oldBy[m.Key]
		switch {
		case !found:
			return false
		case m.Key == string(PartStatus):
			oldStatus, newStatus = ov, m.Value
		case m.Key == string(PartMetadata):
			if !sameMetadata(ov, m.Value) {
				return false
			}
		case !bytes.Equal(ov, m.Value):
			return false
		}
	}
	if newStatus == nil {
		return true
	}
	oldMembers, nm, ok := memberPair(oldStatus, newStatus)
	if !ok {
		return false
	}
	var e *evaluator
	defer func() {
		if e != nil {
			s.release(e)
		}
	}()
	for _, m := range nm {
		if !l.statusMembers[m.Key] {
			return false
		}
		if ov, found := oldMembers[m.Key]; found && bytes.Equal(ov, m.Value) {
			continue
		}
		key := "valid\x00" + string(kind) + "\x00status." + m.Key + "\x00" + string(m.Value)
		r, hit := s.cache.get(key)
		if !hit {
			if e == nil {
				var err error
				if e, err = s.acquire(); err != nil {
					return false
				}
			}
			expr, err := cuejson.Extract(string(PartStatus)+".json", m.Value)
			if err != nil {
				return false
			}
			// Validate alone: it reports a missing required field whenever it reports
			// nothing else, and any violation sends the update the long way.
			r = result{}
			if err := e.members[kind][m.Key].Unify(e.ctx.BuildExpr(expr)).Validate(cue.Concrete(true), cue.Final()); err != nil {
				r.violations = violationsOf(err)
			}
			s.cache.put(key, r)
		}
		if len(r.violations) > 0 {
			return false
		}
	}
	return true
}

// sameMetadata reports whether two metadata objects hold the same members, as written,
// but for the ones the API server writes itself (serverMetadata).
func sameMetadata(old, obj []byte) bool {
	if bytes.Equal(old, obj) {
		return true
	}
	oldBy, n, ok := memberPair(old, obj)
	if !ok {
		return false
	}
	count := 0
	for _, m := range n {
		if slices.Contains(serverMetadata, m.Key) {
			continue
		}
		count++
		if ov, found := oldBy[m.Key]; !found || !bytes.Equal(ov, m.Value) {
			return false
		}
	}
	for key := range oldBy {
		if !slices.Contains(serverMetadata, key) {
			count--
		}
	}
	return count == 0
}

// memberPair is the members of the objects old and obj: old's by key, obj's in order; ok is
// false when either is not an object with distinct keys.
func memberPair(old, obj []byte) (oldBy map[string][]byte, members []jsonraw.Member, ok bool) {
	o, ok := jsonraw.Members(old)
	if !ok {
		return nil, nil, false
	}
	members, ok = jsonraw.Members(obj)
	if !ok {
		return nil, nil, false
	}
	return byKey(o), members, true
}

func byKey(ms []jsonraw.Member) map[string][]byte {
	out := make(map[string][]byte, len(ms))
	for _, m := range ms {
		out[m.Key] = m.Value
	}
	return out
}
