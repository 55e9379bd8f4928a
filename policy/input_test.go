package policy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/agentcube/sandboxpool/internal/jsonraw/jsonrawtest"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// slowInputOf is the input as the policy read it before inputOf parsed the objects on
// their own: the whole request encoded, then decoded through interface{}.
func slowInputOf(t *testing.T, req *admissionv1.AdmissionRequest) ast.Value {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"request": req})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ast.ValueFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestInputOfMatchesEncodingJSON checks that the input built from the objects' own JSON
// is the value encoding/json gives for the whole request, for objects that exercise what
// the two parsers could read differently, each twice (the second time from the kept
// subtrees).
func TestInputOfMatchesEncodingJSON(t *testing.T) {
	c := newTerms()
	objects := map[string]string{
		"pool":              `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool","metadata":{"name":"placeholder-n","labels":{"a":"b"}},"spec":{"nodeName":"n","resourcePolicy":{"resources":{"cpu":"2","memory":4294967296}}}}`,
		"numbers":           `{"a":1e3,"b":-0,"c":0.5,"d":9223372036854775807,"e":123456789012345678901234567890,"f":1E-7,"g":-12.50}`,
		"escapes":           `{"k:{\"type\":\"Ready\"}":{".":{}},"s":"tab\tnew\nline \/ \\ \u00e9 \u2028","pair":"\ud83d\ude00"}`,
		"lone surrogates":   `{"a":"\ud800","b":"x\udfffy","c":"\uD83D\u0041"}`,
		"invalid utf-8":     "{\"a\":\"\xff\xfe\",\"b\":\"ok\"}",
		"duplicate keys":    `{"a":1,"a":2,"b":{"c":true,"c":false}}`,
		"empty and nested":  `{"a":{},"b":[],"c":[[],[{}],null,true,false,""],"d":null}`,
		"whitespace":        " \n\t{ \"a\" : [ 1 , 2 ] }\n ",
		"top-level array":   `[1,"two",{"three":3}]`,
		"top-level literal": `"just a string"`,
		"large subtrees":    `{"a":{"b":[1,2,{"c":"` + strings.Repeat("x", 150) + `"}],"d":{"e":[` + strings.Repeat(`"y",`, 60) + `"z"]}},"f":[[[` + strings.Repeat(`{"g":true},`, 20) + `null]]]}`,
	}
	for name, obj := range objects {
		t.Run(name, func(t *testing.T) {
			req := &admissionv1.AdmissionRequest{
				UID:       "u",
				Kind:      metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: v1alpha1.KindSandboxPool},
				Resource:  metav1.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools},
				Operation: admissionv1.Update,
				UserInfo:  authenticationv1.UserInfo{Username: "u", Groups: []string{"g"}, Extra: map[string]authenticationv1.ExtraValue{"x": {"y"}}},
				Object:    runtime.RawExtension{Raw: []byte(obj)},
				OldObject: runtime.RawExtension{Raw: []byte(obj)},
			}
			for range 2 {
				got, err := inputOf(req, c)
				if err != nil {
					t.Fatal(err)
				}
				if want := slowInputOf(t, req); got.Compare(want) != 0 {
					t.Errorf("inputOf =\n%v\nwant\n%v", got, want)
				}
			}
		})
	}
	t.Run("no old object, object as a Go value", func(t *testing.T) {
		req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Object: &v1alpha1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}}
		got, err := inputOf(req, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := slowInputOf(t, req); got.Compare(want) != 0 {
			t.Errorf("inputOf =\n%v\nwant\n%v", got, want)
		}
	})
	t.Run("invalid JSON", func(t *testing.T) {
		for _, raw := range []string{`{"a":`, `{"a":01}`, `{"a":NaN}`, "{\"a\":\"\x01\"}", `{} {}`} {
			req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(raw)}}
			if v, err := inputOf(req, c); err == nil {
				t.Errorf("inputOf(%q) = %v, want an error", raw, v)
			}
		}
	})
}

// TestInputsShareOnlyWhatTheyHoldAlike checks that the kept subtrees are shared, never
// changed: two requests with the same envelope and different objects keep their own
// objects, and a kept object is not given the envelope's members.
func TestInputsShareOnlyWhatTheyHoldAlike(t *testing.T) {
	c := newTerms()
	big := func(v string) string { return `{"spec":{"v":"` + v + `","pad":"` + strings.Repeat("p", 200) + `"}}` }
	mk := func(obj string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: "same-uid", Operation: admissionv1.Update,
			UserInfo:  authenticationv1.UserInfo{Username: strings.Repeat("u", 200)},
			Object:    runtime.RawExtension{Raw: []byte(obj)},
			OldObject: runtime.RawExtension{Raw: []byte(big("old"))}}
	}
	a, b := mk(big("a")), mk(big("b"))
	inA, err := inputOf(a, c)
	if err != nil {
		t.Fatal(err)
	}
	wantA := slowInputOf(t, a)
	inB, err := inputOf(b, c)
	if err != nil {
		t.Fatal(err)
	}
	if inA.Compare(wantA) != 0 {
		t.Errorf("the first input changed when the second was built:\n%v\nwant\n%v", inA, wantA)
	}
	if want := slowInputOf(t, b); inB.Compare(want) != 0 {
		t.Errorf("second input =\n%v\nwant\n%v", inB, want)
	}
	k, ok := c.get([]byte(big("old")))
	if !ok {
		t.Fatal("the old object is not kept")
	}
	if obj := k.t.Value.(ast.Object); obj.Len() != 1 {
		t.Errorf("the kept old object has %d members, want 1: %v", obj.Len(), obj)
	}
}

// checkParse fails t unless parseJSON accepts b exactly when encoding/json does, with the
// value encoding/json gives.
func checkParse(t *testing.T, c *terms, b []byte) {
	t.Helper()
	got, err := parseJSON(b, c, true)
	if valid := json.Valid(b); (err == nil) != valid {
		t.Fatalf("parseJSON(%.60q): error %v, encoding/json says valid=%v", b, err, valid)
	}
	if err != nil {
		return
	}
	want, err := ast.ValueFromReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.Compare(want) != 0 {
		t.Fatalf("parseJSON(%.60q) = %v, want %v", b, got, want)
	}
}

// TestParseJSONChecksWhatItReads checks that the parser, which has no separate validation
// pass, refuses what encoding/json refuses, also around subtrees it has kept: a kept
// subtree's bytes were checked, the JSON around them was not.
func TestParseJSONChecksWhatItReads(t *testing.T) {
	c := newTerms()
	for _, s := range jsonrawtest.Seeds {
		checkParse(t, c, []byte(s))
	}
	big := `{"kept":"` + strings.Repeat("k", subtreeMin) + `"}`
	checkParse(t, c, []byte(big))
	if _, ok := c.get([]byte(big)); !ok {
		t.Fatal("the subtree was not kept")
	}
	for _, s := range []string{
		big, "[" + big, "[" + big + "]", "[" + big + ",]", `{"a":` + big + `}`, `{"a":` + big, `{"a":` + big + `,}`,
		`{"a" ` + big + `}`, `{` + big + `}`, big + big, "[" + big + " " + big + "]", "[" + big + "," + big + "]",
		big[:len(big)-1], `{"a":1,` + big[1:],
	} {
		checkParse(t, c, []byte(s))
	}
}

// FuzzParseJSON compares parseJSON with encoding/json on any input.
func FuzzParseJSON(f *testing.F) {
	for _, s := range jsonrawtest.Seeds {
		if len(s) < 1000 {
			f.Add([]byte(s))
		}
	}
	c := newTerms()
	f.Fuzz(func(t *testing.T, b []byte) { checkParse(t, c, b) })
}
