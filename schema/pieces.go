package schema

import (
	"bytes"
	"encoding/json"
	"strings"

	"cuelang.org/go/cue"
	cuejson "cuelang.org/go/encoding/json"
)

// Default evaluates an object in pieces when its kind's layout allows (layout.go): the
// object without its status, and the status or each of its members. Each piece's result is
// cached by the piece's content, so an object whose spec did not change is not defaulted
// again for it, and a status that changed in one member costs that member. The pieces'
// results are joined into the JSON value Default gives for the whole object (members may
// come in another order). When a piece breaks a rule the whole object is evaluated
// instead, so a denial names exactly what it named before.

// member is one member of a JSON object: its key as written (with its quotes) and decoded,
// and its value as written.
type member struct {
	rawKey []byte
	key    string
	value  []byte
}

// piece is one part of an object that CUE evaluates on its own.
type piece struct {
	name string // "", "status" or "status.<member>": what the piece is, in cache keys
	json []byte
}

// defaultPieces is Default by pieces; ok is false when the kind's layout or the object does
// not allow it (Default then evaluates the whole object, and reports what it finds).
func (s *Schema) defaultPieces(kind Kind, obj []byte) (out []byte, ok bool, err error) {
	l := s.layouts[kind]
	if !l.statusApart && !l.metadataOpen || !json.Valid(obj) {
		return nil, false, nil
	}
	top, ok := members(obj)
	if !ok {
		return nil, false, nil
	}
	var main []member
	var outside []member // metadata members outside the schema, copied to the result
	var status []byte
	for _, m := range top {
		switch {
		case m.key == string(PartStatus) && l.statusApart:
			status = m.value
		case m.key == string(PartMetadata) && l.metadataOpen:
			meta, ok := members(m.value)
			if !ok {
				main = append(main, m)
				continue
			}
			var kept []member
			for _, mm := range meta {
				if l.outsideSchema(mm.key) {
					outside = append(outside, mm)
				} else {
					kept = append(kept, mm)
				}
			}
			if outside == nil {
				main = append(main, m)
			} else {
				main = append(main, member{rawKey: m.rawKey, key: m.key, value: object(kept)})
			}
		default:
			main = append(main, m)
		}
	}
	pieces := []piece{{json: object(main)}}
	var statusMembers []member
	if status != nil {
		if sm, ok := members(status); ok && l.statusMembers != nil && allIn(sm, l.statusMembers) {
			statusMembers = sm
			for _, m := range sm {
				pieces = append(pieces, piece{name: "status." + m.key, json: m.value})
			}
		} else {
			pieces = append(pieces, piece{name: string(PartStatus), json: status})
		}
	}

	results := make([]result, len(pieces))
	keys := make([]string, len(pieces))
	var missed []int
	for i, p := range pieces {
		keys[i] = "default\x00" + string(kind) + "\x00" + p.name + "\x00" + string(p.json)
		var hit bool
		if results[i], hit = s.cache.get(keys[i]); !hit {
			missed = append(missed, i)
		}
	}
	if len(missed) > 0 {
		e, err := s.acquire()
		if err != nil {
			return nil, true, err
		}
		ok := s.evaluatePieces(e, kind, pieces, missed, results)
		s.release(e)
		if !ok {
			return nil, false, nil
		}
		for _, i := range missed {
			s.cache.put(keys[i], results[i])
		}
	}
	for _, r := range results {
		if len(r.violations) > 0 {
			// The report comes from the whole object, as CUE words it: the pieces only
			// decide the objects that pass, which is nearly all of them.
			return nil, false, nil
		}
	}
	res, ok := members(results[0].out)
	if !ok {
		return nil, false, nil
	}
	if outside != nil {
		for i, m := range res {
			if m.key == string(PartMetadata) {
				meta, ok := members(m.value)
				if !ok {
					return nil, false, nil
				}
				res[i].value = object(append(meta, outside...))
			}
		}
	}
	switch {
	case statusMembers != nil:
		st := make([]member, len(statusMembers))
		for i, m := range statusMembers {
			st[i] = member{rawKey: m.rawKey, value: results[i+1].out}
		}
		res = append(res, member{rawKey: []byte(`"status"`), value: object(st)})
	case status != nil:
		res = append(res, member{rawKey: []byte(`"status"`), value: results[1].out})
	}
	return object(res), true, nil
}

// defaulted is the result of a unified value: its JSON, or its violations.
func defaulted(v cue.Value) result {
	if err := v.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return result{violations: violationsOf(err)}
	}
	out, err := v.MarshalJSON()
	if err != nil {
		return result{violations: violationsOf(err)}
	}
	return result{out: out}
}

func allIn(ms []member, set map[string]bool) bool {
	for _, m := range ms {
		if !set[m.key] {
			return false
		}
	}
	return true
}

// object is the JSON object of ms.
func object(ms []member) []byte {
	n := 2
	for _, m := range ms {
		n += len(m.rawKey) + len(m.value) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.rawKey...)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

// members lists the members of raw, a JSON object, as written; ok is false when raw is not
// an object or repeats a key. raw must be valid JSON.
func members(raw []byte) (out []member, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	seen := map[string]bool{}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return []member{}, skipSpace(raw, i+1) == len(raw)
	}
	for i < len(raw) {
		end := skipValue(raw, i)
		rawKey := raw[i:end]
		key := string(rawKey[1 : len(rawKey)-1])
		if bytes.IndexByte(rawKey, '\\') >= 0 {
			if err := json.Unmarshal(rawKey, &key); err != nil {
				return nil, false
			}
		}
		if seen[key] {
			return nil, false
		}
		seen[key] = true
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		end = skipValue(raw, i)
		out = append(out, member{rawKey: rawKey, key: key, value: raw[i:end]})
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return out, skipSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
	return nil, false
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// skipValue is the index just past the JSON value that starts at raw[i].
func skipValue(raw []byte, i int) int {
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch raw[i] {
			case '"':
				i = skipString(raw, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(raw) && raw[i] != ',' && raw[i] != '}' && raw[i] != ']' && raw[i] != ' ' && raw[i] != '\t' && raw[i] != '\n' && raw[i] != '\r' {
		i++
	}
	return i
}

// skipString is the index just past the JSON string that starts at raw[i].
func skipString(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// evaluatePieces fills in the results of the missed pieces. One missed piece is evaluated
// on its own; several are evaluated in one go, as the object they make up (the object
// without what is outside the schema), and that result is cut into the pieces' results, so
// an object seen for the first time costs one evaluation, not one per piece. ok is false
// when a piece cannot be read as CUE or the result cannot be cut (the caller then
// evaluates the whole object).
func (s *Schema) evaluatePieces(e *evaluator, kind Kind, pieces []piece, missed []int, results []result) (ok bool) {
	if len(missed) == 1 {
		i := missed[0]
		p := pieces[i]
		schema := e.defs[kind]
		switch {
		case p.name == string(PartStatus):
			schema = e.parts[kind][PartStatus]
		case p.name != "":
			schema = e.members[kind][strings.TrimPrefix(p.name, "status.")]
		}
		expr, err := cuejson.Extract(string(kind)+".json", p.json)
		if err != nil {
			return false
		}
		results[i] = defaulted(schema.Unify(e.ctx.BuildExpr(expr)))
		return true
	}
	all := pieces[0].json
	if len(pieces) > 1 {
		top, ok := members(all)
		if !ok {
			return false
		}
		var status []member
		for _, p := range pieces[1:] {
			if p.name == string(PartStatus) {
				status = nil
				top = append(top, member{rawKey: []byte(`"status"`), value: p.json})
				break
			}
			status = append(status, member{rawKey: quoted(strings.TrimPrefix(p.name, "status.")), value: p.json})
		}
		if status != nil {
			top = append(top, member{rawKey: []byte(`"status"`), value: object(status)})
		}
		all = object(top)
	}
	expr, err := cuejson.Extract(string(kind)+".json", all)
	if err != nil {
		return false
	}
	r := defaulted(e.defs[kind].Unify(e.ctx.BuildExpr(expr)))
	if len(r.violations) > 0 {
		for _, i := range missed {
			results[i] = r
		}
		return true
	}
	top, ok := members(r.out)
	if !ok {
		return false
	}
	var main []member
	var status []byte
	for _, m := range top {
		if m.key == string(PartStatus) && len(pieces) > 1 {
			status = m.value
		} else {
			main = append(main, m)
		}
	}
	results[0] = result{out: object(main)}
	if len(pieces) == 1 {
		return true
	}
	if pieces[1].name == string(PartStatus) {
		results[1] = result{out: status}
		return true
	}
	sm, ok := members(status)
	if !ok {
		return false
	}
	byKey := map[string][]byte{}
	for _, m := range sm {
		byKey[m.key] = m.value
	}
	for i, p := range pieces[1:] {
		out, found := byKey[strings.TrimPrefix(p.name, "status.")]
		if !found {
			return false
		}
		results[i+1] = result{out: out}
	}
	return true
}

// quoted is the JSON string of s.
func quoted(s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}
