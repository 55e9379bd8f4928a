package crdgen

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
)

// facts is what the conjuncts of one value constrain.
type facts struct {
	kind      cue.Kind
	pattern   []string
	minLength *int64
	maxLength *int64
	minItems  *int64
	maxItems  *int64
	minProps  *int64
	maxProps  *int64
	minimum   *float64
	exclMin   bool
	maximum   *float64
	exclMax   bool
	enum      []string
	message   string // the error("...") alternative of a disjunction: the rule in words
}

// conjuncts flattens v into the values it is the conjunction of, resolving references.
func conjuncts(v cue.Value) []cue.Value {
	op, args := v.Expr()
	switch op {
	case cue.AndOp:
		var out []cue.Value
		for _, a := range args {
			out = append(out, conjuncts(a)...)
		}
		return out
	case cue.SelectorOp:
		if d := cue.Dereference(v); d != v {
			return conjuncts(d)
		}
	}
	return []cue.Value{v}
}

// collect reads the constraints of a scalar value (string, number, bool, or int-or-string).
func collect(v cue.Value) (*facts, error) {
	f := &facts{kind: schema.KindOf(v)}
	for _, c := range conjuncts(v) {
		if err := f.add(c); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *facts) add(c cue.Value) error {
	if c.IsConcrete() {
		if c.Kind() == cue.StringKind {
			s, _ := c.String()
			f.enum = append(f.enum, s)
		}
		return nil // a literal, or an expression that evaluates to one
	}
	op, args := c.Expr()
	switch op {
	case cue.NoOp:
		return nil // a basic type such as string or int
	case cue.RegexMatchOp:
		s, err := args[0].String()
		if err != nil {
			return err
		}
		f.pattern = append(f.pattern, s)
	case cue.GreaterThanEqualOp, cue.GreaterThanOp, cue.LessThanEqualOp, cue.LessThanOp:
		n, err := args[0].Float64()
		if err != nil {
			return err
		}
		switch op {
		case cue.GreaterThanEqualOp, cue.GreaterThanOp:
			f.setMin(n, op == cue.GreaterThanOp)
		default:
			f.setMax(n, op == cue.LessThanOp)
		}
	case cue.CallOp:
		name := fmt.Sprint(args[0])
		if len(args) != 2 {
			return fmt.Errorf("unsupported call %s", name)
		}
		n, err := args[1].Int64()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		switch name {
		case "strings.MaxRunes":
			f.maxLength = &n
		case "strings.MinRunes":
			f.minLength = &n
		case "list.MaxItems":
			f.maxItems = &n
		case "list.MinItems":
			f.minItems = &n
		case "struct.MinFields":
			f.minProps = &n
		case "struct.MaxFields":
			f.maxProps = &n
		default:
			return fmt.Errorf("unsupported builtin %s", name)
		}
	case cue.OrOp:
		return f.addDisjunction(args)
	default:
		return fmt.Errorf("unsupported operator %v in %v", op, c)
	}
	return nil
}

// addDisjunction handles enums ("A" | "B"), a default with its type (*"x" | #Name), and
// int-or-string quantities (int & >0 | =~"..."), each optionally closed by an
// error("rule in words") alternative.
func (f *facts) addDisjunction(alts []cue.Value) error {
	var live []*facts
	allConcrete := true
	for _, a := range alts {
		if err := a.Err(); err != nil {
			if f.message == "" { // the value's own rule comes first; later ones are wider
				f.message = errMsg(err)
			}
			continue
		}
		af, err := collect(a)
		if err != nil {
			return err
		}
		live = append(live, af)
		if !a.IsConcrete() {
			allConcrete = false
		}
	}
	if allConcrete {
		for _, a := range live {
			f.enum = append(f.enum, a.enum...)
		}
		return nil
	}
	for _, a := range live {
		if len(a.enum) > 0 && a.enum != nil && a.pattern == nil && a.maxLength == nil {
			continue // the concrete default beside its type, e.g. *"placeholder" | #Name
		}
		if a.kind == cue.IntKind && f.kind == cue.IntKind|cue.StringKind && a.minimum != nil {
			f.setMin(*a.minimum, a.exclMin)
			continue
		}
		f.merge(a)
	}
	return nil
}

func (f *facts) merge(a *facts) {
	f.pattern = append(f.pattern, a.pattern...)
	if a.minLength != nil {
		f.minLength = a.minLength
	}
	if a.maxLength != nil {
		f.maxLength = a.maxLength
	}
	if a.minimum != nil {
		f.setMin(*a.minimum, a.exclMin)
	}
	if a.maximum != nil {
		f.setMax(*a.maximum, a.exclMax)
	}
	if a.message != "" && f.message == "" {
		f.message = a.message
	}
}

// setMin keeps the tightest lower bound (conjuncts only ever narrow a value).
func (f *facts) setMin(n float64, excl bool) {
	if f.minimum == nil || n > *f.minimum || (n == *f.minimum && excl) {
		f.minimum, f.exclMin = &n, excl
	}
}

// setMax keeps the tightest upper bound.
func (f *facts) setMax(n float64, excl bool) {
	if f.maximum == nil || n < *f.maximum || (n == *f.maximum && excl) {
		f.maximum, f.exclMax = &n, excl
	}
}

// errMsg is the text of an error("...") alternative, without the path CUE prefixes.
func errMsg(err error) string {
	errs := cueerrors.Errors(err)
	if len(errs) == 0 {
		return err.Error()
	}
	format, args := errs[0].Msg()
	return strings.TrimSuffix(fmt.Sprintf(format, args...), ":")
}

// scalar builds the schema of a non-struct, non-list value.
func scalar(f *facts) (*apiextv1.JSONSchemaProps, error) {
	p := &apiextv1.JSONSchemaProps{}
	switch f.kind {
	case cue.StringKind:
		p.Type = "string"
	case cue.BoolKind:
		p.Type = "boolean"
	case cue.IntKind:
		p.Type = "integer"
	case cue.NumberKind, cue.FloatKind:
		p.Type = "number"
	case cue.IntKind | cue.StringKind:
		p.XIntOrString = true
		p.AnyOf = []apiextv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}
	default:
		return nil, fmt.Errorf("unsupported kind %v", f.kind)
	}
	switch len(f.pattern) {
	case 0:
	case 1:
		p.Pattern = f.pattern[0]
	default:
		for _, pat := range f.pattern {
			p.AllOf = append(p.AllOf, apiextv1.JSONSchemaProps{Pattern: pat})
		}
	}
	p.MinLength, p.MaxLength = f.minLength, f.maxLength
	if p.Type == "integer" {
		if isRange(f, math.MinInt32, math.MaxInt32) {
			p.Format, f.minimum, f.maximum = "int32", nil, nil
		} else if isRange(f, math.MinInt64, math.MaxInt64) {
			p.Format, f.minimum, f.maximum = "int64", nil, nil
		} else if f.maximum != nil && *f.maximum == math.MaxInt64 {
			p.Format, f.maximum = "int64", nil
		}
	}
	p.Minimum, p.ExclusiveMinimum = f.minimum, f.exclMin
	p.Maximum, p.ExclusiveMaximum = f.maximum, f.exclMax
	if p.Type == "string" && len(f.enum) > 0 {
		sort.Strings(f.enum)
		for _, e := range f.enum {
			b, _ := json.Marshal(e)
			p.Enum = append(p.Enum, apiextv1.JSON{Raw: b})
		}
	}
	return p, nil
}

func isRange(f *facts, lo, hi float64) bool {
	return f.minimum != nil && f.maximum != nil && *f.minimum == lo && *f.maximum == hi
}

func jsonValue(v cue.Value) (*apiextv1.JSON, error) {
	b, err := v.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return &apiextv1.JSON{Raw: b}, nil
}
