package schema

import (
	"encoding/json"
	"strings"

	"cuelang.org/go/cue"
	cuejson "cuelang.org/go/encoding/json"

	"github.com/agentcube/sandboxpool/schema/jsonraw"
)

// Default evaluates an object in pieces when its kind's layout allows (layout.go): the
// object without its status, and the status or each of its members. Each piece's result is
// cached by the piece's content, so an object whose spec did not change is not defaulted
// again for it, and a status that changed in one member costs that member. The pieces'
// results are joined into the JSON value Default gives for the whole object (members may
// come in another order). When a piece breaks a rule the whole object is evaluated
// instead, so a denial names exactly what it named before.

// piece is one part of an object that CUE evaluates on its own.
type piece struct {
	name string // "", "status" or "status.<member>": what the piece is, in cache keys
	json []byte
}

// defaultPieces is Default by pieces; ok is false when the kind's layout or the object does
// not allow it (Default then evaluates the whole object, and reports what it finds).
func (s *Schema) defaultPieces(kind Kind, obj []byte) (out []byte, ok bool, err error) {
	l := s.layouts[kind]
	if !l.statusApart && !l.metadataOpen || !jsonraw.Valid(obj) {
		return nil, false, nil
	}
	top, ok := jsonraw.Members(obj)
	if !ok {
		return nil, false, nil
	}
	var main []jsonraw.Member
	var outside []jsonraw.Member // metadata members outside the schema, copied to the result
	var status []byte
	for _, m := range top {
		switch {
		case m.Key == string(PartStatus) && l.statusApart:
			status = m.Value
		case m.Key == string(PartMetadata) && l.metadataOpen:
			meta, ok := jsonraw.Members(m.Value)
			if !ok {
				main = append(main, m)
				continue
			}
			var kept []jsonraw.Member
			for _, mm := range meta {
				if l.outsideSchema(mm.Key) {
					outside = append(outside, mm)
				} else {
					kept = append(kept, mm)
				}
			}
			if outside == nil {
				main = append(main, m)
			} else {
				main = append(main, jsonraw.Member{RawKey: m.RawKey, Key: m.Key, Value: jsonraw.Object(kept)})
			}
		default:
			main = append(main, m)
		}
	}
	pieces := []piece{{json: jsonraw.Object(main)}}
	var statusMembers []jsonraw.Member
	if status != nil {
		if sm, ok := jsonraw.Members(status); ok && l.statusMembers != nil && allIn(sm, l.statusMembers) {
			statusMembers = sm
			for _, m := range sm {
				pieces = append(pieces, piece{name: "status." + m.Key, json: m.Value})
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
	res, ok := jsonraw.Members(results[0].out)
	if !ok {
		return nil, false, nil
	}
	if outside != nil {
		for i, m := range res {
			if m.Key == string(PartMetadata) {
				meta, ok := jsonraw.Members(m.Value)
				if !ok {
					return nil, false, nil
				}
				res[i].Value = jsonraw.Object(append(meta, outside...))
			}
		}
	}
	switch {
	case statusMembers != nil:
		st := make([]jsonraw.Member, len(statusMembers))
		for i, m := range statusMembers {
			st[i] = jsonraw.Member{RawKey: m.RawKey, Value: results[i+1].out}
		}
		res = append(res, jsonraw.Member{RawKey: []byte(`"status"`), Value: jsonraw.Object(st)})
	case status != nil:
		res = append(res, jsonraw.Member{RawKey: []byte(`"status"`), Value: results[1].out})
	}
	return jsonraw.Object(res), true, nil
}

// defaulted is the result of a unified Value: its JSON, or its violations.
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

func allIn(ms []jsonraw.Member, set map[string]bool) bool {
	for _, m := range ms {
		if !set[m.Key] {
			return false
		}
	}
	return true
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
		top, ok := jsonraw.Members(all)
		if !ok {
			return false
		}
		var status []jsonraw.Member
		for _, p := range pieces[1:] {
			if p.name == string(PartStatus) {
				status = nil
				top = append(top, jsonraw.Member{RawKey: []byte(`"status"`), Value: p.json})
				break
			}
			status = append(status, jsonraw.Member{RawKey: quoted(strings.TrimPrefix(p.name, "status.")), Value: p.json})
		}
		if status != nil {
			top = append(top, jsonraw.Member{RawKey: []byte(`"status"`), Value: jsonraw.Object(status)})
		}
		all = jsonraw.Object(top)
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
	top, ok := jsonraw.Members(r.out)
	if !ok {
		return false
	}
	var main []jsonraw.Member
	var status []byte
	for _, m := range top {
		if m.Key == string(PartStatus) && len(pieces) > 1 {
			status = m.Value
		} else {
			main = append(main, m)
		}
	}
	results[0] = result{out: jsonraw.Object(main)}
	if len(pieces) == 1 {
		return true
	}
	if pieces[1].name == string(PartStatus) {
		results[1] = result{out: status}
		return true
	}
	sm, ok := jsonraw.Members(status)
	if !ok {
		return false
	}
	byKey := map[string][]byte{}
	for _, m := range sm {
		byKey[m.Key] = m.Value
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
