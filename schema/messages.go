package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The messages of a *ValidationError read like the API server's (k8s.io/apimachinery's
// field.Error): one per bad field, naming the field, its value and what is allowed —
//
//	spec.placeholderPod.tolerations[0].effect: Unsupported value: "NoEvict": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"
//	spec.resourcePolicy.resources.cpu: Invalid value: "0": must be a quantity greater than zero: ...
//	spec.selector: Required value
//
// CUE reports a failed disjunction once per alternative ("conflicting values "NoSchedule"
// and "NoEvict"", four times for four values), a builtin by its call and a bound by its
// operator. The words come from the schema instead: what the field's definition allows
// (its enum, its error("...") alternative, its @crd rule's message when the rule relates
// it to another field) is read once, when the schema is compiled (ruleNode), and CUE's own
// message is kept only for what the schema has no words for (a bound, a builtin, a type).

// ruleNode is what the schema allows at one place of an object.
type ruleNode struct {
	fields map[string]*ruleNode
	// elem is the rule of a list's elements, or of a map's values ([key]: value).
	elem *ruleNode
	// keyRule is what a map's keys must be: the words of the key constraint.
	keyRule string
	// optional: the field is declared optional (name?), so a "required" error about it comes
	// from a condition on another field.
	optional bool
	// enum are the values an enum allows, in the schema's order ("" left out: it means the
	// same as no value); message is the words of the value's error("...") alternative.
	enum    []string
	message string
	// typ is the JSON type the value must have, as the API server names it.
	typ string
	// calls are the builtins that always constrain the value ("list.MaxItems(256)"); one
	// CUE reports that is not among them applies under a condition on another field.
	calls []string
	// crdRule and crdMessage are the struct's @crd(rule=..., message=...): a rule that
	// relates its fields, in CEL and in words.
	crdRule, crdMessage string
}

// maxRuleDepth bounds the walk of the schema (it is not recursive; this guards a change).
const maxRuleDepth = 24

// rulesOf reads what the schema allows at each place of v.
func rulesOf(v cue.Value, depth int) *ruleNode {
	n := &ruleNode{typ: jsonType(KindOf(v))}
	n.enum, n.message = wordsOf(v)
	for _, c := range conjunctsOf(v) {
		if op, args := c.Expr(); op == cue.CallOp && len(args) == 2 {
			n.calls = append(n.calls, fmt.Sprintf("%v(%v)", args[0], args[1]))
		}
	}
	if depth > maxRuleDepth {
		return n
	}
	switch KindOf(v) {
	case cue.StructKind:
		for _, a := range cue.Dereference(v).Attributes(cue.DeclAttr) {
			if rule, ok, _ := a.Lookup(0, "rule"); ok && a.Name() == Attribute {
				n.crdRule = rule
				n.crdMessage, _, _ = a.Lookup(0, "message")
			}
		}
		it, err := v.Fields(cue.Optional(true), cue.Patterns(true))
		if err != nil {
			return n
		}
		n.fields = map[string]*ruleNode{}
		for it.Next() {
			sel := it.Selector()
			if sel.ConstraintType() == cue.PatternConstraint {
				n.elem = rulesOf(it.Value(), depth+1)
				_, n.keyRule = wordsOf(sel.Pattern())
				continue
			}
			c := rulesOf(it.Value(), depth+1)
			c.optional = sel.ConstraintType() == cue.OptionalConstraint
			n.fields[sel.Unquoted()] = c
		}
	case cue.ListKind:
		n.elem = rulesOf(v.LookupPath(cue.MakePath(cue.AnyIndex)), depth+1)
	}
	return n
}

// jsonType names the JSON type of a CUE kind the way OpenAPI does.
func jsonType(k cue.Kind) string {
	switch k {
	case cue.BoolKind:
		return "boolean"
	case cue.IntKind:
		return "integer"
	case cue.NumberKind, cue.FloatKind:
		return "number"
	case cue.StringKind:
		return "string"
	case cue.StructKind:
		return "object"
	case cue.ListKind:
		return "array"
	case cue.IntKind | cue.StringKind:
		return "integer or string"
	}
	return ""
}

// wordsOf reads a value's enum and the words of its error("...") alternative, looking
// through references and conjunctions: the first error("...") found is the value's own rule
// (a field's rule comes before a map pattern's that also applies to it).
func wordsOf(v cue.Value) (enum []string, message string) {
	for _, c := range conjunctsOf(v) {
		op, args := c.Expr()
		if op != cue.OrOp {
			continue
		}
		var values []string
		allLiterals := true
		for _, a := range args {
			if err := a.Err(); err != nil {
				if message == "" {
					message = errorWords(err)
				}
				continue
			}
			s, err := a.String()
			if err != nil || !a.IsConcrete() {
				allLiterals = false
				if _, m := wordsOf(a); message == "" {
					message = m // *"placeholder" | #DNSSubdomain: the words of the type
				}
				continue
			}
			if s != "" {
				values = append(values, s)
			}
		}
		if allLiterals && enum == nil {
			enum = values
		}
	}
	return enum, message
}

// conjunctsOf flattens v into the values it is the conjunction of, resolving references.
func conjunctsOf(v cue.Value) []cue.Value {
	op, args := v.Expr()
	switch op {
	case cue.AndOp:
		var out []cue.Value
		for _, a := range args {
			out = append(out, conjunctsOf(a)...)
		}
		return out
	case cue.SelectorOp:
		if d := cue.Dereference(v); d != v {
			return conjunctsOf(d)
		}
	}
	return []cue.Value{v}
}

// errorWords is the text of an error("...") alternative, without the path CUE prefixes.
func errorWords(err error) string {
	errs := cueerrors.Errors(err)
	if len(errs) == 0 {
		return err.Error()
	}
	format, args := errs[0].Msg()
	return fmt.Sprintf(format, args...)
}

// lookup finds the rule at a path of selectors (as violation.path, the definition first);
// ok is false when the schema has nothing there.
func (n *ruleNode) lookup(sels []string) (node, parent *ruleNode, ok bool) {
	node = n
	for _, s := range sels {
		if strings.HasPrefix(s, "#") {
			continue
		}
		parent = node
		switch {
		case node.fields[unquote(s)] != nil:
			node = node.fields[unquote(s)]
		case node.elem != nil:
			node = node.elem
		default:
			return nil, parent, false
		}
	}
	return node, parent, true
}

func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

// The messages CUE gives for what the schema has no words for.
var (
	boundRE   = regexp.MustCompile(`\(out of bound ([<>]=?)(-?[0-9.eE+]+)\)`)
	regexRE   = regexp.MustCompile(`\(out of bound =~"(.*)"\)$`)
	builtinRE = regexp.MustCompile(`does not satisfy (list\.MaxItems|list\.MinItems|strings\.MaxRunes|strings\.MinRunes|struct\.MinFields|struct\.MaxFields)\((\d+)\)`)
	typeRE    = regexp.MustCompile(`mismatched types`)
)

// fieldError words the errors CUE reported for one field (msgs, at the selectors sels) as
// the API server would: one field.Error. value is the field's value in the object, nil
// when it has none.
func (n *ruleNode) fieldError(sels []string, msgs []string, value any, present bool) FieldError {
	path := fieldPath(sels)
	node, parent, known := n.lookup(sels)
	crossField := func(name string) string {
		if parent != nil && parent.crdMessage != "" && strings.Contains(parent.crdRule, "self."+name) {
			return parent.crdMessage
		}
		return ""
	}
	name := ""
	if len(sels) > 0 {
		name = unquote(sels[len(sels)-1])
	}
	has := func(s string) bool {
		return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, s) })
	}
	var e *field.Error
	switch {
	case has("field is required but not present"):
		detail := ""
		if known && node.optional {
			detail = crossField(name)
		}
		e = field.Required(field.NewPath(path), detail)
	case has("field not allowed") && parent != nil && parent.elem != nil && parent.keyRule != "":
		// A map key the key constraint refuses: the map is the field, the key its value.
		e = field.Invalid(field.NewPath(fieldPath(sels[:len(sels)-1])), name, parent.keyRule)
	case has("field not allowed") || !known:
		e = field.Forbidden(field.NewPath(path), "field not declared in the schema")
	case !present:
		e = field.Required(field.NewPath(path), "")
	case len(node.enum) > 0 && !slices.Contains(node.enum, fmt.Sprint(value)):
		e = field.NotSupported(field.NewPath(path), value, node.enum)
	case ruleWords(msgs, node.message) != "":
		e = field.Invalid(field.NewPath(path), value, ruleWords(msgs, node.message))
	default:
		e = cueFieldError(field.NewPath(path), value, msgs, crossField(name), node)
	}
	return FieldError{Path: e.Field, Msg: e.ErrorBody()}
}

// cueOwnRE matches the messages CUE words itself; every other message is the words of an
// error("...") alternative of the schema.
var cueOwnRE = regexp.MustCompile(`^(conflicting values|\d+ errors in empty disjunction|invalid value|invalid left-hand value|incomplete value|field is required|field not allowed|value .* not of type|non-concrete value|cannot )`)

// ruleWords is the words that explain a field's errors: those of its own rule when CUE
// reported them, else the words of another rule CUE reported (one that applies under a
// condition, such as the pool name of spec.nodeName), else its own rule's ("" if none).
func ruleWords(msgs []string, own string) string {
	if own != "" && slices.Contains(msgs, own) {
		return own
	}
	for _, m := range msgs {
		if !cueOwnRE.MatchString(m) {
			return m
		}
	}
	return own
}

// cueFieldError words a rule the schema gives no words for from CUE's message: a bound, a
// builtin, a pattern or a type. A rule a @crd message explains (a condition on another
// field) takes that message.
func cueFieldError(p *field.Path, value any, msgs []string, crossField string, node *ruleNode) *field.Error {
	for _, m := range msgs {
		if b := builtinRE.FindStringSubmatch(m); b != nil {
			limit, _ := strconv.Atoi(b[2])
			switch {
			case crossField != "" && !slices.Contains(node.calls, b[1]+"("+b[2]+")"):
				return field.Invalid(p, value, crossField)
			case b[1] == "list.MaxItems":
				return field.TooMany(p, lengthOf(value), limit)
			case b[1] == "strings.MaxRunes":
				return field.TooLongCharacters(p, fmt.Sprint(value), limit)
			case b[1] == "struct.MaxFields":
				return field.TooMany(p, lengthOf(value), limit)
			case b[1] == "struct.MinFields":
				return field.Invalid(p, value, fmt.Sprintf("must have at least %d properties", limit))
			case b[1] == "list.MinItems":
				return field.Invalid(p, value, fmt.Sprintf("must have at least %d items", limit))
			default: // strings.MinRunes
				return field.Invalid(p, value, fmt.Sprintf("must be at least %d characters", limit))
			}
		}
		if b := boundRE.FindStringSubmatch(m); b != nil {
			return field.Invalid(p, value, "must be "+map[string]string{
				">=": "greater than or equal to", ">": "greater than", "<=": "less than or equal to", "<": "less than",
			}[b[1]]+" "+b[2])
		}
		if b := regexRE.FindStringSubmatch(m); b != nil {
			re, err := strconv.Unquote(`"` + b[1] + `"`)
			if err != nil {
				re = b[1]
			}
			return field.Invalid(p, value, "must match the regular expression '"+re+"'")
		}
		if typeRE.MatchString(m) && node.typ != "" {
			return field.Invalid(p, value, "must be of type "+node.typ)
		}
	}
	if crossField != "" {
		return field.Invalid(p, value, crossField)
	}
	return field.Invalid(p, value, strings.Join(msgs, "; "))
}

// lengthOf is the number of items of a JSON list or object value.
func lengthOf(v any) int {
	switch v := v.(type) {
	case []any:
		return len(v)
	case map[string]any:
		return len(v)
	}
	return 0
}

// valueAt is the value at a path of selectors in a JSON object, and whether it is there.
func valueAt(obj []byte, sels []string) (any, bool) {
	// Numbers stay as written (json.Number), as the API server shows them.
	d := json.NewDecoder(bytes.NewReader(obj))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	for _, s := range sels {
		if strings.HasPrefix(s, "#") {
			continue
		}
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[unquote(s)]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}
