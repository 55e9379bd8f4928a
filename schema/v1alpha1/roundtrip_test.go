package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/schema/crdgen"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func newObject(t *testing.T, kind string) runtime.Object {
	t.Helper()
	switch kind {
	case v1alpha1.KindSandboxPool:
		return &v1alpha1.SandboxPool{}
	case v1alpha1.KindSandboxPoolClass:
		return &v1alpha1.SandboxPoolClass{}
	}
	t.Fatalf("unknown kind %q", kind)
	return nil
}

// goRoundTrip decodes strictly into the Go type and encodes again.
func goRoundTrip(t *testing.T, kind string, in []byte) []byte {
	t.Helper()
	obj := newObject(t, kind)
	strict, err := sigsjson.UnmarshalStrict(in, obj, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		t.Fatalf("decoding into Go: %v", err)
	}
	if len(strict) > 0 {
		t.Fatalf("the Go type lacks fields the schema has: %v", strict)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip proves that every example and golden object passes the CUE schema and
// survives the Go types unchanged, both as written and as defaulted by the schema.
func TestRoundTrip(t *testing.T) {
	s := schema.MustCompiled()
	objs, err := corpus.Valid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			defaulted, err := s.Default(schema.Kind(o.Kind), o.JSON)
			if err != nil {
				t.Fatalf("schema rejects it: %v", err)
			}
			for name, in := range map[string][]byte{"as written": o.JSON, "defaulted": defaulted} {
				out := goRoundTrip(t, o.Kind, in)
				if diffs := diffJSON(t, in, out); len(diffs) > 0 {
					t.Errorf("%s: Go types changed the object:\n  %s", name, strings.Join(diffs, "\n  "))
				}
				if _, err := s.Default(schema.Kind(o.Kind), out); err != nil {
					t.Errorf("%s: schema rejects what the Go types wrote: %v", name, err)
				}
			}
		})
	}
}

func diffJSON(t *testing.T, a, b []byte) []string {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	var diffs []string
	walkDiff("", x, y, &diffs)
	return diffs
}

// walkDiff compares two JSON values. Quantities compare by value, as Kubernetes does:
// 4 and "4" are the same quantity.
func walkDiff(path string, x, y any, diffs *[]string) {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v became %v", path, x, y))
			return
		}
		keys := map[string]bool{}
		for k := range xv {
			keys[k] = true
		}
		for k := range yv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			walkDiff(path+"."+k, xv[k], yv[k], diffs)
		}
	case []any:
		yv, ok := y.([]any)
		if !ok || len(xv) != len(yv) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v became %v", path, x, y))
			return
		}
		for i := range xv {
			walkDiff(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i], diffs)
		}
	default:
		if reflect.DeepEqual(x, y) || sameQuantity(x, y) {
			return
		}
		*diffs = append(*diffs, fmt.Sprintf("%s: %v became %v", path, x, y))
	}
}

func sameQuantity(x, y any) bool {
	qx, ok1 := quantity(x)
	qy, ok2 := quantity(y)
	return ok1 && ok2 && qx.Cmp(qy) == 0
}

func quantity(v any) (resource.Quantity, bool) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case float64:
		s = fmt.Sprint(v)
	default:
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// TestGoTypesMatchCRDSchema walks the generated CRD schema and the Go types side by side:
// every schema property has a Go field of a matching type and every Go field is in the
// schema. Together with the round trip this makes the hand-written types a checked
// equivalent of the CUE definitions.
func TestGoTypesMatchCRDSchema(t *testing.T) {
	crds, err := crdgen.Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]reflect.Type{
		v1alpha1.KindSandboxPoolClass: reflect.TypeFor[v1alpha1.SandboxPoolClass](),
		v1alpha1.KindSandboxPool:      reflect.TypeFor[v1alpha1.SandboxPool](),
	}
	if len(crds) != len(types) {
		t.Fatalf("%d CRDs for %d Go kinds", len(crds), len(types))
	}
	for _, crd := range crds {
		typ, ok := types[crd.Spec.Names.Kind]
		if !ok {
			t.Fatalf("no Go type for kind %s", crd.Spec.Names.Kind)
		}
		var problems []string
		compareShape(crd.Spec.Names.Kind, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, typ, &problems)
		for _, p := range problems {
			t.Error(p)
		}
	}
}

var (
	timeType     = reflect.TypeFor[metav1.Time]()
	quantityType = reflect.TypeFor[resource.Quantity]()
	metaType     = reflect.TypeFor[metav1.ObjectMeta]()
)

func compareShape(path string, s apiextv1.JSONSchemaProps, typ reflect.Type, problems *[]string) {
	bad := func(format string, args ...any) {
		*problems = append(*problems, path+": "+fmt.Sprintf(format, args...))
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ {
	case timeType:
		if s.Type != "string" {
			bad("Go metav1.Time but schema type %q", s.Type)
		}
		return
	case quantityType:
		if !s.XIntOrString {
			bad("Go resource.Quantity but schema is not int-or-string")
		}
		return
	case metaType:
		if s.Type != "object" {
			bad("metadata must be an object")
		}
		return
	}
	switch typ.Kind() {
	case reflect.Struct:
		if s.Type != "object" || s.AdditionalProperties != nil {
			bad("Go struct %s but schema type %q", typ, s.Type)
			return
		}
		fields := jsonFields(typ)
		for name, f := range fields {
			ps, ok := s.Properties[name]
			if !ok {
				bad("Go field %s.%s (json %q) is not in the schema", typ.Name(), f.Name, name)
				continue
			}
			compareShape(path+"."+name, ps, f.Type, problems)
		}
		for name := range s.Properties {
			if _, ok := fields[name]; !ok {
				bad("schema property %q has no Go field in %s", name, typ)
			}
		}
	case reflect.Map:
		if s.Type != "object" || s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil {
			bad("Go map but schema has no additionalProperties")
			return
		}
		compareShape(path+"[*]", *s.AdditionalProperties.Schema, typ.Elem(), problems)
	case reflect.Slice:
		if s.Type != "array" || s.Items == nil || s.Items.Schema == nil {
			bad("Go slice but schema type %q", s.Type)
			return
		}
		compareShape(path+"[*]", *s.Items.Schema, typ.Elem(), problems)
	case reflect.String:
		if s.Type != "string" {
			bad("Go string but schema type %q", s.Type)
		}
	case reflect.Bool:
		if s.Type != "boolean" {
			bad("Go bool but schema type %q", s.Type)
		}
	case reflect.Int32, reflect.Int64:
		want := "int32"
		if typ.Kind() == reflect.Int64 {
			want = "int64"
		}
		if s.Type != "integer" || (s.Format != "" && s.Format != want) {
			bad("Go %s but schema type %q format %q", typ.Kind(), s.Type, s.Format)
		}
	default:
		bad("unexpected Go kind %s", typ.Kind())
	}
}

// jsonFields lists a struct's JSON fields, flattening inline embedded structs.
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			maps.Copy(out, jsonFields(f.Type))
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}
