package jsonraw_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/internal/jsonraw"
	"github.com/agentcube/sandboxpool/internal/jsonraw/jsonrawtest"
)

// TestValidAgreesWithEncodingJSON compares Valid with encoding/json's on edge cases.
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range jsonrawtest.Seeds {
		if got, want := jsonraw.Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("jsonraw.Valid(%.40q) = %v, encoding/json says %v", s, got, want)
		}
	}
}

// FuzzValid compares Valid with encoding/json's on any input.
func FuzzValid(f *testing.F) {
	for _, s := range jsonrawtest.Seeds {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := jsonraw.Valid(b), json.Valid(b); got != want {
			t.Errorf("jsonraw.Valid(%q) = %v, encoding/json says %v", b, got, want)
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
		ms, ok := jsonraw.Members([]byte(in))
		if !ok {
			t.Errorf("jsonraw.Members(%s) failed", in)
			continue
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Key+"="+string(m.Value))
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("jsonraw.Members(%s) = %q, want %q", in, got, want)
		}
		if again, ok := jsonraw.Members(jsonraw.Object(ms)); !ok || len(again) != len(ms) {
			t.Errorf("jsonraw.Object(jsonraw.Members(%s)) does not read back: %s", in, jsonraw.Object(ms))
		}
	}
	for _, in := range []string{`[]`, `"a"`, `{"a":1,"a":2}`, `{"a":1} x`} {
		if _, ok := jsonraw.Members([]byte(in)); ok {
			t.Errorf("jsonraw.Members(%s) ok, want not", in)
		}
	}
}

// checkSkip fails t unless SkipValue ends a string, object or array where encoding/json's
// decoder ends it, when the decoder reads one, and stays within b always.
func checkSkip(t *testing.T, b []byte) {
	t.Helper()
	i := jsonraw.SkipSpace(b, 0)
	end := jsonraw.SkipValue(b, i)
	if end > len(b) {
		t.Fatalf("SkipValue(%q) = %d, beyond the input", b, end)
	}
	if i == len(b) || b[i] != '"' && b[i] != '{' && b[i] != '[' {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var v json.RawMessage
	if dec.Decode(&v) == nil && int(dec.InputOffset()) != end {
		t.Fatalf("SkipValue(%q) = %d, encoding/json ends the value at %d", b, end, dec.InputOffset())
	}
}

var skipSeeds = []string{`"\\" "x"`, `["\\"] ["x"]`, `"\\"`, `"\\\""`, `["\\\\\"x\\",1]`, `{"a\\":"\"}"}`, `"\`, `"\\`, `["a\"`, `{"k":"v\\\\"}`}

// TestSkipValue checks SkipValue on escapes and the jsonraw edge cases.
func TestSkipValue(t *testing.T) {
	for _, s := range append(skipSeeds, jsonrawtest.Seeds...) {
		checkSkip(t, []byte(s))
	}
}

// FuzzSkipValue checks SkipValue on any input.
func FuzzSkipValue(f *testing.F) {
	for _, s := range append(skipSeeds, jsonrawtest.Seeds...) {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSkip(t, b) })
}
