// Package jsonraw reads JSON as it is written: whether bytes are valid JSON, as
// encoding/json judges them, and the members of an object with the bytes of their values,
// so that callers can compare, cut and join JSON without decoding it. The webhook cuts a
// review's objects out of it, and the policy parses its input, with it.
package jsonraw

import (
	"bytes"
	"encoding/json"
)

// MaxDepth is encoding/json's limit on nested objects and arrays: deeper JSON is invalid.
const MaxDepth = 10000

// Valid reports whether b is one JSON value, what encoding/json's Valid reports, at several
// times its speed: one pass, no state machine. Like encoding/json it does not check that
// strings are valid UTF-8.
func Valid(b []byte) bool {
	v := validator{b: b}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(b)
}

type validator struct {
	b []byte
	i int
}

func (v *validator) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

func (v *validator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; c {
	case '{':
		if depth+1 > MaxDepth {
			return false
		}
		v.i++
		v.space()
		if v.i < len(v.b) && v.b[v.i] == '}' {
			v.i++
			return true
		}
		for {
			v.space()
			if !v.str() {
				return false
			}
			v.space()
			if v.i >= len(v.b) || v.b[v.i] != ':' {
				return false
			}
			v.i++
			v.space()
			if !v.value(depth + 1) {
				return false
			}
			v.space()
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case ',':
				v.i++
			case '}':
				v.i++
				return true
			default:
				return false
			}
		}
	case '[':
		if depth+1 > MaxDepth {
			return false
		}
		v.i++
		v.space()
		if v.i < len(v.b) && v.b[v.i] == ']' {
			v.i++
			return true
		}
		for {
			v.space()
			if !v.value(depth + 1) {
				return false
			}
			v.space()
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case ',':
				v.i++
			case ']':
				v.i++
				return true
			default:
				return false
			}
		}
	case '"':
		return v.str()
	case 't':
		return v.literal("true")
	case 'f':
		return v.literal("false")
	case 'n':
		return v.literal("null")
	default:
		return v.number()
	}
}

func (v *validator) literal(s string) bool {
	if !bytes.HasPrefix(v.b[v.i:], []byte(s)) {
		return false
	}
	v.i += len(s)
	return true
}

func (v *validator) str() bool {
	if v.i >= len(v.b) || v.b[v.i] != '"' {
		return false
	}
	for v.i++; v.i < len(v.b); v.i++ {
		switch c := v.b[v.i]; {
		case c == '"':
			v.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.i++
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if v.i+4 >= len(v.b) {
					return false
				}
				for _, h := range v.b[v.i+1 : v.i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				v.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func (v *validator) number() bool {
	digits := func() int {
		n := 0
		for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
			v.i++
			n++
		}
		return n
	}
	if v.i < len(v.b) && v.b[v.i] == '-' {
		v.i++
	}
	switch {
	case v.i >= len(v.b):
		return false
	case v.b[v.i] == '0':
		v.i++
	case v.b[v.i] >= '1' && v.b[v.i] <= '9':
		digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if digits() == 0 {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// String is the index just past the JSON string that starts at raw[i], and whether it is
// one as encoding/json judges it (its bytes are not checked for UTF-8).
func String(raw []byte, i int) (end int, ok bool) {
	v := validator{b: raw, i: i}
	ok = v.str()
	return v.i, ok
}

// Number is the index just past the JSON number that starts at raw[i], and whether it is
// one.
func Number(raw []byte, i int) (end int, ok bool) {
	v := validator{b: raw, i: i}
	ok = v.number()
	return v.i, ok
}

// Member is one member of a JSON object: its key as written (with its quotes) and decoded,
// and its value as written.
type Member struct {
	RawKey []byte
	Key    string
	Value  []byte
}

// Members lists the members of raw, a JSON object, as written; ok is false when raw is not
// an object or repeats a key. raw must be valid JSON.
func Members(raw []byte) (out []Member, ok bool) {
	i := SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	seen := map[string]bool{}
	i = SkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return []Member{}, SkipSpace(raw, i+1) == len(raw)
	}
	for i < len(raw) {
		end := SkipValue(raw, i)
		rawKey := raw[i:end]
		if len(rawKey) < 2 || rawKey[0] != '"' {
			return nil, false
		}
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
		i = SkipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = SkipSpace(raw, i+1)
		end = SkipValue(raw, i)
		out = append(out, Member{RawKey: rawKey, Key: key, Value: raw[i:end]})
		i = SkipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = SkipSpace(raw, i+1)
		case '}':
			return out, SkipSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
	return nil, false
}

// Object is the JSON object of ms.
func Object(ms []Member) []byte {
	n := 2
	for _, m := range ms {
		n += len(m.RawKey) + len(m.Value) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.RawKey...)
		b = append(b, ':')
		b = append(b, m.Value...)
	}
	return append(b, '}')
}

// SkipSpace is the index of the first byte at or after i that is not JSON white space.
func SkipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// SkipValue is the index just past the JSON value that starts at raw[i] when raw is valid;
// on invalid JSON it returns some index up to len(raw), never beyond.
func SkipValue(raw []byte, i int) int {
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '"':
		return SkipString(raw, i)
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch raw[i] {
			case '"':
				i = SkipString(raw, i)
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

// SkipString is the index just past the JSON string that starts at raw[i]; an unterminated
// string ends at len(raw).
func SkipString(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(raw)
}
