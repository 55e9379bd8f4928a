package jsonraw

import (
	"encoding/json"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5`, `1e5`, `1E+5`, `1e`, `1e+`, `-1.25e-7`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `NaN`, `Infinity`, `+1`,
	`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`,
	`"\u00e9"`, `"\u00G9"`, `"\ud800"`, `"\x41"`, `"\/"`, "\"tab\there\"", "\"\x7f\"", "\"\xff\xfe\"",
	` {"a" : [ true , null ] } `, `{"a":{"b":{"c":[]}}}`, `{} {}`, `{}x`, `"unterminated`, `"\`, `"\u12`,
	strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
	strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
}

// TestValidAgreesWithEncodingJSON compares Valid with encoding/json's on edge cases.
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%.40q) = %v, encoding/json says %v", s, got, want)
		}
	}
}

// FuzzValid compares Valid with encoding/json's on any input.
func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func TestMembers(t *testing.T) {
	for in, want := range map[string][]string{
		`{}`:                              {},
		` { "a" : 1 , "b":{"c":"}"} } `:   {"a=1", `b={"c":"}"}`},
		`{"a\"b":[1,{"x":"]"}],"c":null}`: {`a"b=[1,{"x":"]"}]`, "c=null"},
		`{"\u0061":true}`:                 {"a=true"},
	} {
		ms, ok := Members([]byte(in))
		if !ok {
			t.Errorf("Members(%s) failed", in)
			continue
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Key+"="+string(m.Value))
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("Members(%s) = %q, want %q", in, got, want)
		}
		if again, ok := Members(Object(ms)); !ok || len(again) != len(ms) {
			t.Errorf("Object(Members(%s)) does not read back: %s", in, Object(ms))
		}
	}
	for _, in := range []string{`[]`, `"a"`, `{"a":1,"a":2}`, `{"a":1} x`} {
		if _, ok := Members([]byte(in)); ok {
			t.Errorf("Members(%s) ok, want not", in)
		}
	}
}
