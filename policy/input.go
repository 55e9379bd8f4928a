package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/valyala/fastjson"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The policy's input is {"request": req} as the JSON an AdmissionReview carries, as an
// ast.Value. Encoding the whole request and decoding it again through interface{} was a
// third of a decision: the objects, which make up most of the request, already arrive as
// JSON. So the request is encoded without its objects, and every part is parsed straight
// into an ast.Value (fastjson's parser, no interface{} in between); the objects are parsed
// from the bytes the API server sent. The value is the one ast.ValueFromReader gives for
// the same JSON: its leaves are made by ast.InterfaceToValue, objects keep the last of
// duplicate keys as encoding/json does, and JSON that fastjson would read differently from
// encoding/json (invalid UTF-8, escaped surrogates) takes the slow path.

var parsers fastjson.ParserPool

// inputOf is {"request": req} as an ast.Value.
func inputOf(req *admissionv1.AdmissionRequest) (ast.Value, error) {
	shallow := *req
	shallow.Object, shallow.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
	raw, err := json.Marshal(&shallow)
	if err != nil {
		return nil, fmt.Errorf("encoding admission request: %w", err)
	}
	v, err := valueOfJSON(raw)
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
		v, err := valueOfExtension(o.ext)
		if err != nil {
			return nil, fmt.Errorf("decoding admission request: %s: %w", o.key, err)
		}
		r.Insert(ast.InternedTerm(o.key), ast.NewTerm(v))
	}
	return ast.NewObject([2]*ast.Term{ast.InternedTerm("request"), ast.NewTerm(r)}), nil
}

// valueOfExtension is the value json.Marshal gives ext: its raw JSON, else its object
// encoded, else null (RawExtension.MarshalJSON).
func valueOfExtension(ext runtime.RawExtension) (ast.Value, error) {
	raw, err := ext.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return valueOfJSON(raw)
}

// valueOfJSON parses one JSON value into an ast.Value.
func valueOfJSON(raw []byte) (ast.Value, error) {
	if !json.Valid(raw) {
		return nil, errors.New("invalid JSON")
	}
	if !utf8.Valid(raw) || escapesSurrogate(raw) {
		return ast.ValueFromReader(bytes.NewReader(raw))
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(raw)
	if err != nil {
		return nil, err
	}
	t, err := toTerm(v)
	if err != nil {
		return nil, err
	}
	return t.Value, nil
}

// escapesSurrogate reports whether raw may hold a \u escape of a UTF-16 surrogate
// (\uD800-\uDFFF), which fastjson and encoding/json decode differently when unpaired.
func escapesSurrogate(raw []byte) bool {
	for {
		i := bytes.Index(raw, []byte(`\u`))
		if i < 0 || i+3 >= len(raw) {
			return false
		}
		if c, d := raw[i+2], raw[i+3]; (c == 'd' || c == 'D') && (d >= '8' && d <= '9' || d >= 'a' && d <= 'f' || d >= 'A' && d <= 'F') {
			return true
		}
		raw = raw[i+2:]
	}
}

// toTerm is the term of a parsed JSON value, its leaves interned where OPA interns them.
func toTerm(v *fastjson.Value) (*ast.Term, error) {
	switch v.Type() {
	case fastjson.TypeNull:
		return ast.InternedNullTerm, nil
	case fastjson.TypeTrue:
		return ast.InternedTerm(true), nil
	case fastjson.TypeFalse:
		return ast.InternedTerm(false), nil
	case fastjson.TypeNumber:
		s := string(v.MarshalTo(nil))
		if t := ast.InternedIntNumberTermFromString(s); t != nil {
			return t, nil
		}
		n, err := ast.NumberChecked(s)
		if err != nil {
			return nil, err
		}
		return ast.NewTerm(n), nil
	case fastjson.TypeString:
		return ast.InternedTerm(string(v.GetStringBytes())), nil
	case fastjson.TypeArray:
		elems := v.GetArray()
		terms := make([]*ast.Term, len(elems))
		for i, e := range elems {
			t, err := toTerm(e)
			if err != nil {
				return nil, err
			}
			terms[i] = t
		}
		return ast.NewTerm(ast.NewArray(terms...)), nil
	case fastjson.TypeObject:
		o := v.GetObject()
		out := ast.NewObjectWithCapacity(o.Len())
		var err error
		o.Visit(func(key []byte, e *fastjson.Value) {
			if err != nil {
				return
			}
			var t *ast.Term
			if t, err = toTerm(e); err == nil {
				out.Insert(ast.InternedTerm(string(key)), t)
			}
		})
		return ast.NewTerm(out), err
	}
	return nil, fmt.Errorf("unexpected JSON value of type %s", v.Type())
}
