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

	"github.com/agentcube/sandboxpool/internal/jsonraw"
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

// terms keeps the terms of recent subtrees, by their JSON, in two generations: a lookup
// that finds a term in the older one moves it to the newer one, and when the newer one is
// full the older one is dropped. So what recent requests used stays, at most twice the
// bound. Each Engine has its own.
type terms struct {
	mu        sync.Mutex // guards the rest
	cur, prev map[string]kept
	size      int
}

func newTerms() *terms { return &terms{cur: map[string]kept{}} }

// kept is a kept subtree's term and its height: the levels of objects and arrays in it,
// itself included, which count towards the depth limit of whatever holds it.
type kept struct {
	t      *ast.Term
	height int
}

func (c *terms) get(raw []byte) (kept, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.cur[string(raw)]; ok {
		return k, true
	}
	if k, ok := c.prev[string(raw)]; ok {
		c.keep(raw, k)
		return k, true
	}
	return kept{}, false
}

func (c *terms) put(raw []byte, k kept) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep(raw, k)
}

// keep stores k in the newer generation; the caller holds the lock.
func (c *terms) keep(raw []byte, k kept) {
	if c.size+len(raw) > subtreeBytes {
		c.prev, c.cur, c.size = c.cur, map[string]kept{}, 0
	}
	c.cur[string(raw)] = k
	c.size += len(raw)
}

// inputOf is {"request": req} as an ast.Value, with the terms of subtrees kept in c.
func inputOf(req *admissionv1.AdmissionRequest, c *terms) (ast.Value, error) {
	shallow := *req
	shallow.Object, shallow.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
	raw, err := json.Marshal(&shallow)
	if err != nil {
		return nil, fmt.Errorf("encoding admission request: %w", err)
	}
	v, err := parseJSON(raw, c, false) // the objects are inserted into it: never kept
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
		v, err := parseJSON(raw, c, true)
		if err != nil {
			return nil, fmt.Errorf("decoding admission request: %s: %w", o.key, err)
		}
		r.Insert(ast.InternedTerm(o.key), ast.NewTerm(v))
	}
	return ast.NewObject([2]*ast.Term{ast.InternedTerm("request"), ast.NewTerm(r)}), nil
}

// parseJSON parses one JSON value into an ast.Value, keeping the terms of its subtrees in
// c; keepTop says whether the value itself may be kept (its parts may be either way). The
// parser checks the JSON as it reads it, as encoding/json would, except in kept subtrees:
// their bytes are those of JSON it has read and checked before.
func parseJSON(raw []byte, c *terms, keepTop bool) (ast.Value, error) {
	if !utf8.Valid(raw) {
		if !jsonraw.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return ast.ValueFromReader(bytes.NewReader(raw))
	}
	p := parser{raw: raw, terms: c, skipKeep: !keepTop}
	t, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if p.space(); p.i != len(raw) {
		return nil, p.invalid()
	}
	return t.Value, nil
}

// parser reads JSON into ast terms.
type parser struct {
	raw   []byte
	i     int
	terms *terms
	// skipKeep is true while the next object or array must not be kept.
	skipKeep bool
	// deepest is the deepest level of objects and arrays read so far (1 is the top).
	deepest int
}

func (p *parser) invalid() error {
	if p.i >= len(p.raw) {
		return errors.New("invalid JSON: unexpected end")
	}
	return fmt.Errorf("invalid JSON at offset %d", p.i)
}

func (p *parser) space() { p.i = jsonraw.SkipSpace(p.raw, p.i) }

// next skips space and reports whether the next byte is c.
func (p *parser) next(c byte) bool {
	p.space()
	return p.i < len(p.raw) && p.raw[p.i] == c
}

func (p *parser) value(depth int) (*ast.Term, error) {
	p.space()
	if p.i >= len(p.raw) {
		return nil, p.invalid()
	}
	switch c := p.raw[p.i]; c {
	case '{', '[':
		if depth >= jsonraw.MaxDepth {
			return nil, p.invalid()
		}
		start := p.i
		end := jsonraw.SkipValue(p.raw, start)
		keep := end-start >= subtreeMin && !p.skipKeep
		p.skipKeep = false
		if keep {
			if k, ok := p.terms.get(p.raw[start:end]); ok {
				if depth+k.height > jsonraw.MaxDepth {
					return nil, p.invalid()
				}
				p.i, p.deepest = end, max(p.deepest, depth+k.height)
				return k.t, nil
			}
		}
		outer := p.deepest
		p.deepest = depth + 1
		var t *ast.Term
		var err error
		if c == '{' {
			t, err = p.object(depth + 1)
		} else {
			t, err = p.array(depth + 1)
		}
		if err != nil {
			return nil, err
		}
		if keep && p.i == end {
			p.terms.put(p.raw[start:end], kept{t: t, height: p.deepest - depth})
		}
		p.deepest = max(outer, p.deepest)
		return t, nil
	case '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return ast.InternedTerm(s), nil
	case 't':
		return p.literal("true", ast.InternedTerm(true))
	case 'f':
		return p.literal("false", ast.InternedTerm(false))
	case 'n':
		return p.literal("null", ast.InternedNullTerm)
	default:
		start := p.i
		end, ok := jsonraw.Number(p.raw, start)
		if !ok {
			p.i = end
			return nil, p.invalid()
		}
		p.i = end
		s := string(p.raw[start:end])
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

func (p *parser) literal(s string, t *ast.Term) (*ast.Term, error) {
	if !bytes.HasPrefix(p.raw[p.i:], []byte(s)) {
		return nil, p.invalid()
	}
	p.i += len(s)
	return t, nil
}

func (p *parser) object(depth int) (*ast.Term, error) {
	p.i++ // {
	obj := ast.NewObject()
	if p.next('}') {
		p.i++
		return ast.NewTerm(obj), nil
	}
	for {
		if !p.next('"') {
			return nil, p.invalid()
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if !p.next(':') {
			return nil, p.invalid()
		}
		p.i++
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		obj.Insert(ast.InternedTerm(k), v)
		switch {
		case p.next(','):
			p.i++
		case p.next('}'):
			p.i++
			return ast.NewTerm(obj), nil
		default:
			return nil, p.invalid()
		}
	}
}

func (p *parser) array(depth int) (*ast.Term, error) {
	p.i++ // [
	var elems []*ast.Term
	if p.next(']') {
		p.i++
		return ast.ArrayTerm(elems...), nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		elems = append(elems, v)
		switch {
		case p.next(','):
			p.i++
		case p.next(']'):
			p.i++
			return ast.ArrayTerm(elems...), nil
		default:
			return nil, p.invalid()
		}
	}
}

// str reads a string; one with escapes is decoded by encoding/json.
func (p *parser) str() (string, error) {
	start := p.i
	end, ok := jsonraw.String(p.raw, start)
	p.i = end
	if !ok {
		return "", p.invalid()
	}
	quoted := p.raw[start:end]
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", err
	}
	return s, nil
}
