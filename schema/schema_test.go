package schema_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/corpus"
)

func mustSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Compiled()
	if err != nil {
		t.Fatalf("compiling embedded schema: %v", err)
	}
	return s
}

func validObjects(t *testing.T) []corpus.Object {
	t.Helper()
	objs, err := corpus.Valid()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 5 {
		t.Fatalf("corpus too small: %d valid objects", len(objs))
	}
	return objs
}

func TestValidObjectsPass(t *testing.T) {
	s := mustSchema(t)
	for _, o := range validObjects(t) {
		t.Run(o.Name, func(t *testing.T) {
			if err := s.Validate(schema.Kind(o.Kind), o.JSON); err != nil {
				t.Fatalf("valid object rejected: %v", err)
			}
		})
	}
}

// TestInvalidObjectsFailWithTheirMessage is the table of the schema's messages: each
// invalid object of the corpus fails with exactly its "# error:" lines, one per bad field,
// worded as the API server words its own — an enum as Unsupported value with the supported
// values, a pattern, range or rule in words as Invalid value with the value, a missing field
// as Required value (with the rule that relates it to another field, if one does).
func TestInvalidObjectsFailWithTheirMessage(t *testing.T) {
	s := mustSchema(t)
	objs, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 15 {
		t.Fatalf("the invalid corpus must hold at least 15 objects, has %d", len(objs))
	}
	for _, o := range objs {
		t.Run(o.Name, func(t *testing.T) {
			if len(o.Errors) == 0 {
				t.Fatal(`corpus file has no "# error:" line`)
			}
			err := s.Validate(schema.Kind(o.As), o.JSON)
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			var got []string
			for _, f := range ve.Fields {
				got = append(got, f.String())
			}
			if !slices.Equal(got, o.Errors) {
				t.Errorf("field errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(o.Errors, "\n  "))
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s := mustSchema(t)
	in := `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool",
		"metadata":{"name":"placeholder-n1"},
		"spec":{"classRef":{"name":"c"},"nodeName":"n1","override":{},
		        "resourcePolicy":{"resources":{"cpu":1,"memory":"1Gi"}}}}`
	out, err := s.Default(schema.KindSandboxPool, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Spec struct {
			PlaceholderPod struct{ RuntimeClassName string }
			Override       struct{ Enabled *bool }
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.PlaceholderPod.RuntimeClassName != "placeholder" {
		t.Errorf("runtimeClassName not defaulted to placeholder: %s", out)
	}
	if got.Spec.Override.Enabled == nil || *got.Spec.Override.Enabled {
		t.Errorf("override.enabled not defaulted to false: %s", out)
	}
	// An explicit value wins over the default.
	in2 := strings.Replace(in, `"override":{}`, `"placeholderPod":{"runtimeClassName":"kata"}`, 1)
	out, err = s.Default(schema.KindSandboxPool, []byte(in2))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"runtimeClassName":"kata"`) {
		t.Errorf("explicit runtimeClassName lost: %s", out)
	}
}

// TestPoolNameRule checks the deterministic name, including the hash form for long node
// names, against an independent computation.
func TestPoolNameRule(t *testing.T) {
	s := mustSchema(t)
	long := strings.Repeat("n", 200) + "." + strings.Repeat("x", 49) // 250 characters
	sum := sha256.Sum256([]byte(long))
	hashed := "placeholder-" + long[:232] + "-" + hex.EncodeToString(sum[:])[:8]
	exactly241 := strings.Repeat("a", 241)
	for _, tc := range []struct {
		node, name string
		ok         bool
	}{
		{"node-a", "placeholder-node-a", true},
		{"node-a", "placeholder-node-b", false},
		{exactly241, "placeholder-" + exactly241, true},
		{long, hashed, true},
		{long, "placeholder-" + long[:241], false},
	} {
		obj := `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool",
			"metadata":{"name":"` + tc.name + `"},
			"spec":{"classRef":{"name":"c"},"nodeName":"` + tc.node + `",
			        "resourcePolicy":{"resources":{"cpu":1,"memory":"1Gi"}}}}`
		err := s.Validate(schema.KindSandboxPool, []byte(obj))
		if (err == nil) != tc.ok {
			t.Errorf("node %.20s… name %.30s…: ok=%v, err=%v", tc.node, tc.name, tc.ok, err)
		}
		if len(tc.name) > 253 {
			t.Errorf("test name longer than 253: %d", len(tc.name))
		}
	}
}

func TestUnknownKindAndBadJSON(t *testing.T) {
	s := mustSchema(t)
	if err := s.Validate("Nope", []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Errorf("unknown kind: got %v", err)
	}
	if err := s.Validate(schema.KindSandboxPool, []byte(`{"spec":`)); err == nil {
		t.Error("truncated JSON accepted")
	}
}

func TestConcurrentUse(t *testing.T) {
	s := mustSchema(t)
	objs := validObjects(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(objs))
	for range 8 {
		wg.Go(func() {
			for _, o := range objs {
				if _, err := s.Default(schema.Kind(o.Kind), o.JSON); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCUECLI runs the pinned cue CLI exactly as users do, from the repository root:
// cue vet -d '#Kind' ./schema FILE. make test sets SANDBOXPOOL_CUE.
func TestCUECLI(t *testing.T) {
	cue := os.Getenv("SANDBOXPOOL_CUE")
	if cue == "" {
		if os.Getenv("SANDBOXPOOL_REQUIRE_TOOLS") != "" {
			t.Fatal("SANDBOXPOOL_CUE is not set; run the tests with make test")
		}
		t.Skip("SANDBOXPOOL_CUE is not set (make test builds the pinned cue CLI and sets it)")
	}
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	vet := func(kind, file string) (string, error) {
		cmd := exec.Command(cue, "vet", "-d", "#"+kind, "./schema", file)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, o := range validObjects(t) {
		f := o.Name
		if strings.HasPrefix(o.Kind, "SandboxPool") && !strings.Contains(o.Name, "/") {
			f = findFile(t, root, o.Name)
		}
		if out, err := vet(o.Kind, f); err != nil {
			t.Errorf("cue vet %s: %v\n%s", f, err, out)
		}
	}
	invalid, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range invalid {
		f := "schema/corpus/invalid/" + o.Name
		out, err := vet(o.As, f)
		if err == nil {
			t.Errorf("cue vet accepted %s", f)
			continue
		}
		if want := cuePathStyle(o.CUE); !strings.Contains(out, want) {
			t.Errorf("cue vet %s does not say %q:\n%s", f, want, out)
		}
	}
}

func findFile(t *testing.T, root, name string) string {
	for _, dir := range []string{"examples", "schema/corpus/golden"} {
		if _, err := os.Stat(root + "/" + dir + "/" + name); err == nil {
			return dir + "/" + name
		}
	}
	t.Fatalf("%s not found", name)
	return ""
}

var (
	indexRE = regexp.MustCompile(`\[(\d+)\]`)
	identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)
)

// cuePathStyle rewrites "a.b[0].hugepages-2Mi: msg" the way the cue CLI prints paths:
// "a.b.0.\"hugepages-2Mi\": msg".
func cuePathStyle(e string) string {
	path, msg, _ := strings.Cut(e, ": ")
	path = indexRE.ReplaceAllString(path, ".$1")
	parts := strings.Split(path, ".")
	// Resource names may contain dots; only the last segment needs that care here.
	for i, p := range parts {
		if !identRE.MatchString(p) && !regexp.MustCompile(`^\d+$`).MatchString(p) {
			parts[i] = `"` + p + `"`
		}
	}
	return strings.Join(parts, ".") + ": " + msg
}

// TestImmutableFields: the fields marked @crd(immutable), which the CRD makes CEL rules and
// sandboxpool vet checks with ValidateTransition.
func TestImmutableFields(t *testing.T) {
	s := mustSchema(t)
	for kind, want := range map[schema.Kind][]string{
		schema.KindSandboxPoolClass: {"spec.selector"},
		schema.KindSandboxPool:      {"spec.classRef.name", "spec.nodeName"},
	} {
		if got := s.ImmutableFields(kind); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: ImmutableFields = %q, want %q", kind, got, want)
		}
	}
}

func TestValidateTransition(t *testing.T) {
	s := mustSchema(t)
	pool, err := corpus.Find("pool-override.yaml")
	if err != nil {
		t.Fatal(err)
	}
	old := string(pool.JSON)
	for name, tt := range map[string]struct {
		obj  string
		want string // the field errors, joined; "" = valid
	}{
		"unchanged":            {obj: old},
		"override changed":     {obj: strings.Replace(old, `"enabled":true`, `"enabled":false`, 1)},
		"node changed":         {obj: strings.Replace(old, `"nodeName":"node-a"`, `"nodeName":"node-c"`, 1), want: "spec.nodeName: field is immutable"},
		"class changed":        {obj: strings.Replace(old, `"classRef":{"name":"default"}`, `"classRef":{"name":"gold"}`, 1), want: "spec.classRef.name: field is immutable"},
		"class ref removed":    {obj: strings.Replace(old, `"classRef":{"name":"default"},`, ``, 1), want: "spec.classRef.name: field is immutable"},
		"not an object at all": {obj: `[]`, want: "error"},
	} {
		t.Run(name, func(t *testing.T) {
			if tt.obj == old && name != "unchanged" {
				t.Fatal("the replacement did not apply: the example changed")
			}
			err := s.ValidateTransition(schema.KindSandboxPool, []byte(old), []byte(tt.obj))
			var ve *schema.ValidationError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.want == "error" && (err == nil || errors.As(err, &ve)):
				t.Errorf("got %v, want an error that is no validation error", err)
			case tt.want != "" && tt.want != "error" && (!errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].String() != tt.want):
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}
