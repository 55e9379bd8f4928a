package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/schema/jsonraw"
)

// The policy's input is {"request": req} as the JSON an AdmissionReview carries, as an
// ast.Value. Encoding the whole request and decoding it again through interface{} was a
// third of a decision, and most of the request is the two objects, which arrive as JSON
// and mostly repeat: the stored object of one status write is the new object of the
// previous one, and both hold the same spec, the same managedFields entries but one, the
// same status members but one. So the request is encoded without its objects, every part
// is parsed straight into ast terms, and the terms of larger objects and arrays are kept
// by their JSON (subtrees): a subtree seen before is not converted again. The value is the
// one ast.ValueFromReader gives for the same JSON: leaves are made as ast.InterfaceToValue
// makes them, objects keep the last of duplicate keys as encoding/json does, escaped
// strings are decoded by encoding/json, and JSON that is not valid UTF-8 takes the slow
// path. ast values are immutable, so a kept term is shared by every input that holds it.

// subtreeMin is the size from which an object's or array's term is kept.
const subtreeMin = 128

// subtreeBytes bounds the JSON of the kept subtrees (their terms take a few times more).
const subtreeBytes = 4 << 20

// subtrees keeps the terms of recent subtrees in two generations: a lookup that finds a
// term in the older one moves it to the newer one, and when the newer one is full the
// older one is dropped. So what recent requests used stays, at most twice the bound.
var subtrees = struct {
	sync.Mutex
	cur, prev map[string]*ast.Term
	size      int
}{cur: map[string]*ast.Term{}}

func subtree(raw []byte) (*ast.Term, bool) {
	subtrees.Lock()
	defer subtrees.Unlock()
	if t, ok := subtrees.cur[string(raw)]; ok {
		return t, true
	}
	if t, ok := subtrees.prev[string(raw)]; ok {
		keepSubtree(raw, t)
		return t, true
	}
	return nil, false
}

func putSubtree(raw []byte, t *ast.Term) {
	subtrees.Lock()
	defer subtrees.Unlock()
	keepSubtree(raw, t)
}

// keepSubtree stores t in the newer generation; the caller holds the lock.
func keepSubtree(raw []byte, t *ast.Term) {
	if subtrees.size+len(raw) > subtreeBytes {
		subtrees.prev, subtrees.cur, subtrees.size = subtrees.cur, map[string]*ast.Term{}, 0
	}
	subtrees.cur[string(raw)] = t
	subtrees.size += len(raw)
}

// inputOf is {"request": req} as an ast.Value.
func inputOf(req *admissionv1.AdmissionRequest) (ast.Value, error) {
	shallow := *req
	shallow.Object, shallow.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
	raw, err := json.Marshal(&shallow)
	if err != nil {
		return nil, fmt.Errorf("encoding admission request: %w", err)
	}
	v, err := parseJSON(raw, false) // the objects are inserted into it: never kept
	if err != nil {
		return nil, fmt.Errorf("decoding admission request: %w", err)
	}
	r, ok := v.(ast.Object)
	if !ok {
		return nil, errors.New("decoding admission request: not a JSON object")
	}
	for _, o := range []struct {
		key string
		ext runtime.RawExtension
	}{{"object", req.Object}, {"oldObject", req.OldObject}} {
		raw, err := o.ext.MarshalJSON() // its raw JSON, else its object encoded, else null
		if err != nil {
			return nil, fmt.Errorf("encoding admission request: %s: %w", o.key, err)
		}
		v, err := valueOfJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("decoding admission request: %s: %w", o.key, err)
		}
		r.Insert(ast.InternedTerm(o.key), ast.NewTerm(v))
	}
	return ast.NewObject([2]*ast.Term{ast.InternedTerm("request"), ast.NewTerm(r)}), nil
}

// valueOfJSON parses one JSON value into an ast.Value.
func valueOfJSON(raw []byte) (ast.Value, error) { return parseJSON(raw, true) }

// parseJSON parses one JSON value into an ast.Value; keepTop says whether the value itself
// may be kept as a subtree (its parts may be either way).
func parseJSON(raw []byte, keepTop bool) (ast.Value, error) {
	if !jsonraw.Valid(raw) {
		return nil, errors.New("invalid JSON")
	}
	if !utf8.Valid(raw) {
		return ast.ValueFromReader(bytes.NewReader(raw))
	}
	p := parser{raw: raw, skipKeep: !keepTop}
	t, err := p.value()
	if err != nil {
		return nil, err
	}
	return t.Value, nil
}

// parser reads valid JSON (jsonraw.Valid) into ast terms.
type parser struct {
	raw []byte
	i   int
	// skipKeep is true while the next object or array must not be kept.
	skipKeep bool
}

func (p *parser) space() {
	for p.i < len(p.raw) && (p.raw[p.i] == ' ' || p.raw[p.i] == '\t' || p.raw[p.i] == '\n' || p.raw[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) value() (*ast.Term, error) {
	p.space()
	if p.i >= len(p.raw) {
		return nil, errors.New("unexpected end of JSON")
	}
	switch c := p.raw[p.i]; c {
	case '{', '[':
		start := p.i
		end := jsonraw.SkipValue(p.raw, start)
		keep := end-start >= subtreeMin && !p.skipKeep
		p.skipKeep = false
		if keep {
			if t, ok := subtree(p.raw[start:end]); ok {
				p.i = end
				return t, nil
			}
		}
		var t *ast.Term
		var err error
		if c == '{' {
			t, err = p.object()
		} else {
			t, err = p.array()
		}
		if err == nil && keep {
			putSubtree(p.raw[start:end], t)
		}
		return t, err
	case '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return ast.InternedTerm(s), nil
	case 't':
		p.i += len("true")
		return ast.InternedTerm(true), nil
	case 'f':
		p.i += len("false")
		return ast.InternedTerm(false), nil
	case 'n':
		p.i += len("null")
		return ast.InternedNullTerm, nil
	default:
		start := p.i
		for p.i < len(p.raw) && (p.raw[p.i] == '-' || p.raw[p.i] == '+' || p.raw[p.i] == '.' || p.raw[p.i] == 'e' || p.raw[p.i] == 'E' || p.raw[p.i] >= '0' && p.raw[p.i] <= '9') {
			p.i++
		}
		s := string(p.raw[start:p.i])
		if t := ast.InternedIntNumberTermFromString(s); t != nil {
			return t, nil
		}
		n, err := ast.NumberChecked(s)
		if err != nil {
			return nil, err
		}
		return ast.NewTerm(n), nil
	}
}

func (p *parser) object() (*ast.Term, error) {
	p.i++ // {
	obj := ast.NewObject()
	for {
		p.space()
		if p.raw[p.i] == '}' {
			p.i++
			return ast.NewTerm(obj), nil
		}
		if p.raw[p.i] == ',' {
			p.i++
			p.space()
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		p.i++ // :
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		obj.Insert(ast.InternedTerm(k), v)
	}
}

func (p *parser) array() (*ast.Term, error) {
	p.i++ // [
	var elems []*ast.Term
	for {
		p.space()
		if p.raw[p.i] == ']' {
			p.i++
			return ast.ArrayTerm(elems...), nil
		}
		if p.raw[p.i] == ',' {
			p.i++
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		elems = append(elems, v)
	}
}

// str reads a string; one with escapes is decoded by encoding/json.
func (p *parser) str() (string, error) {
	start := p.i
	p.i = jsonraw.SkipString(p.raw, start)
	quoted := p.raw[start:p.i]
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", err
	}
	return s, nil
}
