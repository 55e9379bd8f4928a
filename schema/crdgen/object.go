package crdgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"cuelang.org/go/cue"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
)

// attrName is the CUE attribute the generator reads (see schema/sandboxpool.cue).
const attrName = schema.Attribute

// value builds the schema of any value. It understands exactly the constructs the CUE
// files use and fails on anything else, so a new construct is never silently dropped.
func value(v cue.Value, path string) (*apiextv1.JSONSchemaProps, error) {
	var (
		p   *apiextv1.JSONSchemaProps
		err error
	)
	switch schema.KindOf(v) {
	case cue.StructKind:
		p, err = object(v, path)
	case cue.ListKind:
		p, err = list(v, path)
	default:
		var f *facts
		if f, err = collect(v); err == nil {
			p, err = scalar(f)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Open lists and structs have implicit defaults ([] and {}) that are not API defaults.
	if d, ok := v.Default(); ok && d.IsConcrete() && d.Kind() != cue.StructKind && d.Kind() != cue.ListKind {
		if p.Default, err = jsonValue(d); err != nil {
			return nil, fmt.Errorf("%s: default: %w", path, err)
		}
	}
	return p, nil
}

// object builds the schema of a struct; fields named in skip are left out.
func object(v cue.Value, path string, skip ...string) (*apiextv1.JSONSchemaProps, error) {
	p := &apiextv1.JSONSchemaProps{Type: "object"}
	props := map[string]apiextv1.JSONSchemaProps{}
	var required, names []string
	values := map[string]cue.Value{}
	var pattern *cue.Value
	var keyPattern cue.Value // the label of the pattern constraint: what every key must be
	it, err := v.Fields(cue.Optional(true), cue.Patterns(true))
	if err != nil {
		return nil, err
	}
	for it.Next() {
		if it.Selector().ConstraintType() == cue.PatternConstraint {
			if pattern != nil {
				return nil, fmt.Errorf("%s: more than one pattern constraint", path)
			}
			pv := it.Value()
			pattern, keyPattern = &pv, it.Selector().Pattern()
			continue
		}
		name := it.Selector().Unquoted()
		if slices.Contains(skip, name) {
			names = append(names, name)
			continue
		}
		child := it.Value()
		cp, err := field(child, path+"."+name)
		if err != nil {
			return nil, err
		}
		switch it.Selector().ConstraintType() {
		case cue.RequiredConstraint:
			required = append(required, name)
		case cue.OptionalConstraint:
		default:
			// A regular field must exist after defaulting: default a struct to its fields'
			// defaults ({} when it has none), what the API server makes of an empty one and
			// the CUE evaluation gives.
			if cp.Type == "object" && cp.Default == nil {
				if cp.Default, err = structDefault(cp); err != nil {
					return nil, fmt.Errorf("%s.%s: default: %w", path, name, err)
				}
			}
		}
		props[name] = *cp
		names = append(names, name)
		values[name] = child
	}
	if pattern != nil && len(skip) == 0 {
		ap, err := value(*pattern, path+"[*]")
		if err != nil {
			return nil, err
		}
		p.AdditionalProperties = &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: ap}
		// OpenAPI cannot constrain a map's keys: their rule (the pattern's label,
		// [#QualifiedName]) becomes a CEL rule over every key.
		if rule, ok, err := celForKeys(keyPattern); err != nil {
			return nil, fmt.Errorf("%s: keys: %w", path, err)
		} else if ok {
			p.XValidations = append(p.XValidations, rule)
		}
		// Structural schemas forbid properties next to additionalProperties: named fields
		// become required keys plus CEL rules built from their own schema.
		for _, n := range names {
			f, err := collect(values[n])
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", path, n, err)
			}
			rule, err := celForScalar(n, props[n], ap, f.message)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", path, n, err)
			}
			p.XValidations = append(p.XValidations, rule)
		}
		props = nil
	}
	if len(props) > 0 {
		p.Properties = props
	}
	p.Required = required
	f, err := collect(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.MinProperties, p.MaxProperties = f.minProps, f.maxProps
	// Declaration attributes belong to the struct literal, so look through a reference
	// (override?: #Override) to the definition that declares them.
	for _, a := range cue.Dereference(v).Attributes(cue.DeclAttr) {
		if a.Name() != attrName {
			continue
		}
		rule, _, _ := a.Lookup(0, "rule")
		msg, _, _ := a.Lookup(0, "message")
		if rule == "" || msg == "" {
			return nil, fmt.Errorf("%s: @crd on a struct needs rule= and message=", path)
		}
		p.XValidations = append(p.XValidations, apiextv1.ValidationRule{Rule: rule, Message: msg})
	}
	return p, nil
}

// field builds the schema of a struct field: its value, its doc comment and its @crd
// attribute.
func field(v cue.Value, path string) (*apiextv1.JSONSchemaProps, error) {
	p, err := value(v, path)
	if err != nil {
		return nil, err
	}
	p.Description = doc(v)
	a := v.Attribute(attrName)
	if a.Err() != nil {
		return p, nil
	}
	if ok, _ := a.Flag(0, "immutable"); ok {
		// The path without the kind: "spec.classRef.name is immutable".
		_, field, _ := strings.Cut(path, ".")
		p.XValidations = append(p.XValidations, apiextv1.ValidationRule{
			Rule: "self == oldSelf", Message: field + " is immutable",
		})
	}
	if lt, ok, _ := a.Lookup(0, "listType"); ok {
		p.XListType = &lt
	}
	if keys, ok, _ := a.Lookup(0, "listMapKeys"); ok {
		p.XListMapKeys = strings.Split(keys, "|")
	}
	return p, nil
}

func list(v cue.Value, path string) (*apiextv1.JSONSchemaProps, error) {
	f, err := collect(v)
	if err != nil {
		return nil, err
	}
	items, err := value(v.LookupPath(cue.MakePath(cue.AnyIndex)), path+"[*]")
	if err != nil {
		return nil, err
	}
	return &apiextv1.JSONSchemaProps{
		Type:     "array",
		Items:    &apiextv1.JSONSchemaPropsOrArray{Schema: items},
		MinItems: f.minItems,
		MaxItems: f.maxItems,
	}, nil
}

// celForScalar states a named field's scalar schema as a CEL rule on its parent map.
// message is the rule in words (the CUE error("...") alternative).
// Patterns the map's value schema (shared) already checks are left out.
func celForScalar(name string, s apiextv1.JSONSchemaProps, shared *apiextv1.JSONSchemaProps, message string) (apiextv1.ValidationRule, error) {
	sel := "self[" + quoteCEL(name) + "]"
	var conds []string
	switch {
	case s.XIntOrString:
		var intCond, strCond = "true", "true"
		if s.Minimum != nil {
			op := ">="
			if s.ExclusiveMinimum {
				op = ">"
			}
			intCond = fmt.Sprintf("%s %s %d", sel, op, int64(*s.Minimum))
		}
		var pats []string
		if s.Pattern != "" {
			pats = append(pats, s.Pattern)
		}
		for _, a := range s.AllOf {
			if a.Pattern != shared.Pattern {
				pats = append(pats, a.Pattern)
			}
		}
		if len(pats) > 0 {
			var ms []string
			for _, pat := range pats {
				ms = append(ms, sel+".matches("+quoteCEL(pat)+")")
			}
			strCond = strings.Join(ms, " && ")
		}
		conds = append(conds, fmt.Sprintf("type(%s) == int ? %s : (type(%s) == string && %s)", sel, intCond, sel, strCond))
	default:
		return apiextv1.ValidationRule{}, fmt.Errorf("a named field beside a pattern constraint must be an int-or-string, not %q", s.Type)
	}
	msg := name + ": " + message
	if message == "" {
		msg = name + " is invalid"
	}
	return apiextv1.ValidationRule{
		Rule:      strings.Join(conds, " && "),
		Message:   msg,
		FieldPath: "." + name,
	}, nil
}

// celForKeys states the rule every key of a map must keep (the label of its pattern
// constraint, a string type with patterns and a length bound) as a CEL rule on the map,
// whose message names the first key that breaks it. ok is false when the keys may be any
// string.
func celForKeys(key cue.Value) (rule apiextv1.ValidationRule, ok bool, err error) {
	f, err := collect(key)
	if err != nil {
		return rule, false, err
	}
	if f.kind != cue.StringKind {
		return rule, false, fmt.Errorf("a map key must be a string, not %v", f.kind)
	}
	if len(f.enum) > 0 || f.minimum != nil || f.maximum != nil {
		return rule, false, errors.New("a map key may only be constrained by patterns and its length")
	}
	var conds []string
	if f.minLength != nil {
		conds = append(conds, fmt.Sprintf("size(k) >= %d", *f.minLength))
	}
	if f.maxLength != nil {
		conds = append(conds, fmt.Sprintf("size(k) <= %d", *f.maxLength))
	}
	for _, pat := range f.pattern {
		conds = append(conds, "k.matches("+quoteCEL(pat)+")")
	}
	if len(conds) == 0 {
		return rule, false, nil
	}
	msg := f.message
	if msg == "" {
		msg = "is not a valid key"
	}
	cond := strings.Join(conds, " && ")
	return apiextv1.ValidationRule{
		Rule:    "self.all(k, " + cond + ")",
		Message: "every key " + msg,
		// The first key that breaks the rule; the API server prints Message if this fails.
		MessageExpression: "'key \"' + self.filter(k, !(" + cond + "))[0] + '\" ' + " + quoteCEL(msg),
	}, true, nil
}

func quoteCEL(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// doc is the field's doc comment with each paragraph on one line, as kubectl explain
// wraps text itself.
func doc(v cue.Value) string {
	var paras []string
	for _, cg := range v.Doc() {
		for p := range strings.SplitSeq(strings.TrimSpace(cg.Text()), "\n\n") {
			paras = append(paras, strings.Join(strings.Fields(p), " "))
		}
	}
	return strings.Join(paras, "\n\n")
}

// structDefault is the default of a struct with schema p: an object of the defaults of its
// properties, as the API server fills them in below an empty one. (A CRD's default must
// pass its own schema without the defaults below it: {} would break a minProperties.)
func structDefault(p *apiextv1.JSONSchemaProps) (*apiextv1.JSON, error) {
	d := map[string]json.RawMessage{}
	for name, prop := range p.Properties {
		if prop.Default != nil {
			d[name] = prop.Default.Raw
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return &apiextv1.JSON{Raw: b}, nil
}
