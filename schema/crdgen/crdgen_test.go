package crdgen

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

// TestCommittedCRDsAreUpToDate fails when schema/*.cue changed without make generate.
func TestCommittedCRDsAreUpToDate(t *testing.T) {
	crds, err := Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		want, err := Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(root, "deploy", "crds", crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml")
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make generate", name)
		}
	}
}

// TestImmutableRulesMatchSchema: the CRD's immutability rules (self == oldSelf) are on
// exactly the fields schema.ImmutableFields names, which sandboxpool vet checks offline.
func TestImmutableRulesMatchSchema(t *testing.T) {
	s := schema.MustCompiled()
	crds, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, crd := range crds {
		var got []string
		var walk func(p apiextv1.JSONSchemaProps, path []string)
		walk = func(p apiextv1.JSONSchemaProps, path []string) {
			for _, r := range p.XValidations {
				if r.Rule == "self == oldSelf" {
					got = append(got, strings.Join(path, "."))
				}
			}
			for name, child := range p.Properties {
				walk(child, append(slices.Clone(path), name))
			}
		}
		walk(*crd.Spec.Versions[0].Schema.OpenAPIV3Schema, nil)
		slices.Sort(got)
		if want := s.ImmutableFields(schema.Kinds[i]); !slices.Equal(got, want) {
			t.Errorf("%s: immutable rules on %q, the schema's immutable fields are %q", crd.Name, got, want)
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	var prev [][]byte
	for range 3 {
		crds, err := Generate(schema.MustCompiled())
		if err != nil {
			t.Fatal(err)
		}
		var cur [][]byte
		for _, c := range crds {
			b, err := Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			cur = append(cur, b)
		}
		if prev != nil {
			for i := range cur {
				if !bytes.Equal(prev[i], cur[i]) {
					t.Fatal("two runs of Generate differ")
				}
			}
		}
		prev = cur
	}
}

func compileField(t *testing.T, src string) cue.Value {
	t.Helper()
	v := cuecontext.New().CompileString(src)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWalker(t *testing.T) {
	t.Run("int-or-string quantity with bound and rule message", func(t *testing.T) {
		v := compileField(t, `x: int & >0 | (string & =~"^[1-9]$") | error("must be positive")`)
		f, err := collect(v.LookupPath(cue.ParsePath("x")))
		if err != nil {
			t.Fatal(err)
		}
		p, err := scalar(f)
		if err != nil {
			t.Fatal(err)
		}
		if !p.XIntOrString || p.Pattern != "^[1-9]$" || p.Minimum == nil || *p.Minimum != 0 || !p.ExclusiveMinimum {
			t.Errorf("got %+v", p)
		}
		if f.message != "must be positive" {
			t.Errorf("message %q", f.message)
		}
	})
	t.Run("enum closed by an error alternative", func(t *testing.T) {
		v := compileField(t, `x: "B" | "A" | error("one of A, B")`)
		p, err := value(v.LookupPath(cue.ParsePath("x")), "x")
		if err != nil {
			t.Fatal(err)
		}
		if p.Type != "string" || len(p.Enum) != 2 || string(p.Enum[0].Raw) != `"A"` {
			t.Errorf("got %+v", p)
		}
	})
	t.Run("default and bounded list", func(t *testing.T) {
		v := compileField(t, `import "list"
s: {d: *"x" | string, l?: [...int32] & list.MaxItems(3), r!: int64}`)
		p, err := value(v.LookupPath(cue.ParsePath("s")), "s")
		if err != nil {
			t.Fatal(err)
		}
		if string(p.Properties["d"].Default.Raw) != `"x"` {
			t.Errorf("default: %+v", p.Properties["d"])
		}
		l := p.Properties["l"]
		if l.MaxItems == nil || *l.MaxItems != 3 || l.Items.Schema.Format != "int32" || l.Default != nil {
			t.Errorf("list: %+v", l)
		}
		if p.Properties["r"].Format != "int64" || len(p.Required) != 1 || p.Required[0] != "r" {
			t.Errorf("required/int64: %+v", p)
		}
	})
	t.Run("attributes", func(t *testing.T) {
		v := compileField(t, `s: {
	@crd(rule="self.a != ''",message="a must be set")
	a?: string @crd(immutable)
	c?: [...{type!: string}] @crd(listType=map,listMapKeys=type)
}`)
		p, err := value(v.LookupPath(cue.ParsePath("s")), "s")
		if err != nil {
			t.Fatal(err)
		}
		if len(p.XValidations) != 1 || p.XValidations[0].Message != "a must be set" {
			t.Errorf("struct rule: %+v", p.XValidations)
		}
		a := p.Properties["a"]
		if len(a.XValidations) != 1 || a.XValidations[0].Rule != "self == oldSelf" ||
			a.XValidations[0].Message != "a is immutable" {
			t.Errorf("immutable: %+v", a.XValidations)
		}
		c := p.Properties["c"]
		if c.XListType == nil || *c.XListType != "map" || strings.Join(c.XListMapKeys, ",") != "type" {
			t.Errorf("list map: %+v", c)
		}
	})
	t.Run("named fields beside a pattern become CEL rules", func(t *testing.T) {
		v := compileField(t, `s: {
	cpu!: int & >0 | (string & =~"^[1-9]+$") | error("must be > 0")
	[string]: int & >=0 | (string & =~"^[0-9]+$")
}`)
		p, err := value(v.LookupPath(cue.ParsePath("s")), "s")
		if err != nil {
			t.Fatal(err)
		}
		if p.Properties != nil || p.AdditionalProperties == nil || len(p.Required) != 1 {
			t.Fatalf("got %+v", p)
		}
		if len(p.XValidations) != 1 || !strings.Contains(p.XValidations[0].Rule, "self['cpu'] > 0") ||
			p.XValidations[0].Message != "cpu: must be > 0" {
			t.Errorf("rule: %+v", p.XValidations)
		}
	})
	t.Run("the key of a pattern constraint becomes a CEL rule over the keys", func(t *testing.T) {
		v := compileField(t, `import "strings"
s: {[(string & strings.MaxRunes(5) & =~"^[a-z]+$") | error("must be a short word")]: int}`)
		p, err := value(v.LookupPath(cue.ParsePath("s")), "s")
		if err != nil {
			t.Fatal(err)
		}
		want := apiextv1.ValidationRule{Rule: "self.all(k, size(k) <= 5 && k.matches('^[a-z]+$'))", Message: "every key must be a short word",
			MessageExpression: `'key "' + self.filter(k, !(size(k) <= 5 && k.matches('^[a-z]+$')))[0] + '" ' + 'must be a short word'`}
		if len(p.XValidations) != 1 || p.XValidations[0] != want {
			t.Errorf("rules %+v, want %+v", p.XValidations, want)
		}
		v = compileField(t, `s: {[string]: int}`)
		if p, err := value(v.LookupPath(cue.ParsePath("s")), "s"); err != nil || len(p.XValidations) != 0 {
			t.Errorf("any string as a key: rules %+v, %v; want none", p.XValidations, err)
		}
	})
	t.Run("unknown constructs fail loudly", func(t *testing.T) {
		for _, src := range []string{
			`import "strings"
x: string & strings.HasPrefix("a")`,
			`x: {a: string, [string]: string, [=~"^b"]: int}`,
		} {
			v := compileField(t, src)
			if _, err := value(v.LookupPath(cue.ParsePath("x")), "x"); err == nil {
				t.Errorf("no error for %s", src)
			}
		}
	})
}

// TestEverythingIsBounded: every string, list and map of both kinds' spec and status has an
// upper bound in the CRD (maxLength or an enum, maxItems, maxProperties), so no writer can
// store an object of unbounded size; kube-api-linter's maxlength sees only the fields of our
// Go types, this sees the CRD down to the fields of metav1.Condition, corev1.Toleration
// and metav1.LabelSelector.
func TestEverythingIsBounded(t *testing.T) {
	crds, err := Generate(schema.MustCompiled())
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	var walk func(path string, p apiextv1.JSONSchemaProps)
	walk = func(path string, p apiextv1.JSONSchemaProps) {
		checked++
		switch {
		case p.Type == "string" || p.XIntOrString:
			if p.MaxLength == nil && len(p.Enum) == 0 {
				t.Errorf("%s: a string without maxLength or enum", path)
			}
		case p.Type == "array":
			if p.MaxItems == nil {
				t.Errorf("%s: a list without maxItems", path)
			}
			walk(path+"[*]", *p.Items.Schema)
		case p.Type == "object" && p.AdditionalProperties != nil:
			if p.MaxProperties == nil {
				t.Errorf("%s: a map without maxProperties", path)
			}
			walk(path+"[*]", *p.AdditionalProperties.Schema)
		}
		for name, c := range p.Properties {
			walk(path+"."+name, c)
		}
	}
	for _, crd := range crds {
		root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, top := range []string{"spec", "status"} {
			walk(crd.Spec.Names.Kind+"."+top, root.Properties[top])
		}
	}
	if checked < 100 {
		t.Fatalf("only %d schemas walked", checked)
	}
}
