package schema

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema/corpus"
)

// wholeSchema is the embedded schema evaluated as one piece and without a cache: what
// Default did before it evaluated objects in pieces.
func wholeSchema(t *testing.T) *Schema {
	t.Helper()
	srcs, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(srcs)
	if err != nil {
		t.Fatal(err)
	}
	s.layouts, s.cache = map[Kind]layout{}, nil
	return s
}

// TestLayoutOfTheEmbeddedSchema checks what the embedded schema lets Default evaluate
// apart: a change of it that adds a reference across the pieces shows here first.
func TestLayoutOfTheEmbeddedSchema(t *testing.T) {
	s := MustCompiled()
	pool := s.layouts[KindSandboxPool]
	if !pool.statusApart || !pool.metadataOpen {
		t.Errorf("SandboxPool layout: status apart %v, metadata open %v; want both", pool.statusApart, pool.metadataOpen)
	}
	want := []string{"capacity", "conditions", "lastAppliedGeneration", "nodeCtl", "override", "phase", "placeholderAgent", "placeholderPod", "poolInfo", "resize"}
	var got []string
	for m := range pool.statusMembers {
		got = append(got, m)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("SandboxPool status members apart = %v, want %v", got, want)
	}
	for _, m := range []string{"resourceVersion", "generation", "managedFields", "creationTimestamp", "ownerReferences", "finalizers"} {
		if !pool.outsideSchema(m) {
			t.Errorf("metadata.%s is not outside the schema", m)
		}
	}
	for _, m := range []string{"name", "labels", "annotations"} {
		if pool.outsideSchema(m) {
			t.Errorf("metadata.%s is outside the schema", m)
		}
	}
}

// TestLayoutKeepsDependentPiecesTogether checks the layout on sources where a constraint
// reaches across pieces: those pieces are evaluated together.
func TestLayoutKeepsDependentPiecesTogether(t *testing.T) {
	srcs, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		old, new            string
		apart, membersApart bool
	}{
		"a status member names a sibling": {
			old: "lastAppliedGeneration?: int64 & >=0", new: "lastAppliedGeneration?: int64 & >=0 & <=poolInfo.allocatableMemoryBytes",
			apart: true,
		},
		"a struct-level rule in the status": {
			old: "lastAppliedGeneration?: int64 & >=0", new: "lastAppliedGeneration?: int64 & >=0\n\tif phase != _|_ {resize?: _}",
			apart: true,
		},
		"a required status member": {
			old: "lastAppliedGeneration?: int64 & >=0", new: "lastAppliedGeneration!: int64 & >=0",
			apart: true,
		},
		"the spec reads the status": {
			old: "\tstatus?: #SandboxPoolStatus\n", new: "\tstatus?: #SandboxPoolStatus\n\tif status.phase != _|_ {spec: nodeName: _}\n",
		},
		"the status reads the spec": {
			old: "\tstatus?: #SandboxPoolStatus\n", new: "\tstatus?: #SandboxPoolStatus & {lastAppliedGeneration?: <=len(spec.nodeName)}\n",
		},
		"unchanged": {apart: true, membersApart: true},
	} {
		t.Run(name, func(t *testing.T) {
			changed := maps.Clone(srcs)
			if tc.old != "" {
				b := string(changed["sandboxpool.cue"])
				if !strings.Contains(b, tc.old) {
					t.Fatalf("sandboxpool.cue has no %q", tc.old)
				}
				changed["sandboxpool.cue"] = []byte(strings.Replace(b, tc.old, tc.new, 1))
			}
			s, err := Compile(changed)
			if err != nil {
				t.Fatal(err)
			}
			l := s.layouts[KindSandboxPool]
			if l.statusApart != tc.apart || (l.statusMembers != nil) != tc.membersApart {
				t.Errorf("status apart %v, members apart %v; want %v, %v", l.statusApart, l.statusMembers != nil, tc.apart, tc.membersApart)
			}
		})
	}
}

// TestPiecesDefaultLikeTheWholeObject runs every corpus object, and variants of the
// golden pool that exercise each piece, through Default by pieces and as a whole object:
// the same JSON value or the same violations.
func TestPiecesDefaultLikeTheWholeObject(t *testing.T) {
	pieces, whole := MustCompiled(), wholeSchema(t)
	objs, err := corpus.Valid()
	if err != nil {
		t.Fatal(err)
	}
	invalid, err := corpus.Invalid()
	if err != nil {
		t.Fatal(err)
	}
	type input struct {
		name string
		kind Kind
		json string
	}
	var inputs []input
	for _, o := range objs {
		inputs = append(inputs, input{o.Name, Kind(o.Kind), string(o.JSON)})
	}
	for _, o := range invalid {
		inputs = append(inputs, input{o.Name, Kind(o.As), string(o.JSON)})
	}
	golden, err := corpus.Find("pool-full-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := string(golden.JSON)
	for name, edit := range map[string][2]string{
		"server metadata":         {`"generation":2`, `"generation":2,"resourceVersion":"42","uid":"u","managedFields":[{"manager":"m","fieldsV1":{"f:status":{}}}],"finalizers":["f"]`},
		"bad phase":               {`"phase":"Degraded"`, `"phase":"Bad"`},
		"bad phase and bad spec":  {`"phase":"Degraded"`, `"phase":"Bad"`},
		"unknown status member":   {`"phase":"Degraded"`, `"phase":"Degraded","mood":"fine"`},
		"status not an object":    {`"status":{`, `"status":5,"x":{`},
		"empty status":            {`"status":{`, `"status":{},"x":{`},
		"metadata not an object":  {`"metadata":{`, `"metadata":7,"x":{`},
		"duplicate status member": {`"phase":"Degraded"`, `"phase":"Degraded","phase":"Ready"`},
		"duplicate top member":    {`"kind":"SandboxPool"`, `"kind":"SandboxPool","kind":"SandboxPool"`},
		"escaped key":             {`"phase":"Degraded"`, `"ph\u0061se":"Degraded"`},
		"resize without status":   {`,"status":"Deferred"}`, `}`},
		"wrong kind":              {`"kind":"SandboxPool"`, `"kind":"SandboxPoolClass"`},
		"trailing garbage":        {`"status":{`, `"status":{`},
	} {
		in := strings.Replace(g, edit[0], edit[1], 1)
		if name == "bad phase and bad spec" {
			in = strings.Replace(in, `"nodeName":"node-a"`, `"nodeName":"Node_A"`, 1)
		}
		if name == "trailing garbage" {
			in += " {}"
		}
		if in == g && edit[0] != edit[1] {
			t.Fatalf("%s: the golden pool has no %q", name, edit[0])
		}
		inputs = append(inputs, input{"golden with " + name, KindSandboxPool, in})
	}
	// After the golden pool, copies that differ in one piece each: that piece alone is
	// evaluated, the others come from the cache.
	for _, edit := range [][2]string{
		{`"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":7`},
		{`"phase":"Degraded"`, `"phase":"Ready"`},
		{`"sandbox-pool.io/class":"default"`, `"sandbox-pool.io/class":"other"`},
		{`"generation":2`, `"generation":3`},
		{`"phase":"Degraded"`, `"phase":"Bad"`},
	} {
		inputs = append(inputs, input{"golden", KindSandboxPool, g},
			input{"golden, then " + edit[1], KindSandboxPool, strings.Replace(g, edit[0], edit[1], 1)})
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			for range 2 { // the second time from the cache
				got, gotErr := pieces.Default(in.kind, []byte(in.json))
				want, wantErr := whole.Default(in.kind, []byte(in.json))
				if (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("by pieces: %v; whole: %v", gotErr, wantErr)
				}
				if gotErr != nil {
					if g, w := fieldErrors(gotErr), fieldErrors(wantErr); !slices.Equal(g, w) {
						t.Fatalf("by pieces:\n  %s\nwhole:\n  %s", strings.Join(g, "\n  "), strings.Join(w, "\n  "))
					}
					continue
				}
				var g, w any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatalf("by pieces: %v: %s", err, got)
				}
				if err := json.Unmarshal(want, &w); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(g, w) {
					t.Fatalf("by pieces:\n%s\nwhole:\n%s", got, want)
				}
			}
		})
	}
}

func fieldErrors(err error) []string {
	ve, ok := errors.AsType[*ValidationError](err)
	if !ok {
		return []string{err.Error()}
	}
	var out []string
	for _, f := range ve.Fields {
		out = append(out, f.String())
	}
	slices.Sort(out)
	return out
}

// TestStatusWriteFastPathDecidesLikeTheLongWay runs updates of the golden pool through
// ValidateUpdate with and without the status members' fast path: the same answer, the
// same violations.
func TestStatusWriteFastPathDecidesLikeTheLongWay(t *testing.T) {
	fast, long := MustCompiled(), wholeSchema(t)
	golden, err := corpus.Find("pool-full-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := string(golden.JSON)
	// A stored pool whose last condition breaks today's reason pattern (an older schema's).
	stored := strings.Replace(g, `"reason":"LeaseRenewed"`, `"reason":"lease renewed"`, 1)
	withServer := func(s, rv string) string {
		return strings.Replace(s, `"generation":2`, `"generation":2,"resourceVersion":"`+rv+`","managedFields":[{"manager":"m","time":"`+rv+`"}]`, 1)
	}
	for name, tc := range map[string]struct {
		old, obj string
		valid    bool
	}{
		"a node-ctl figure":                            {g, strings.Replace(g, `"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":5`, 1), true},
		"a figure and server metadata":                 {withServer(g, "1"), withServer(strings.Replace(g, `"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":5`, 1), "2"), true},
		"a negative figure":                            {g, strings.Replace(g, `"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":-5`, 1), false},
		"a bad phase":                                  {g, strings.Replace(g, `"phase":"Degraded"`, `"phase":"Bad"`, 1), false},
		"a resize without its status":                  {g, strings.Replace(g, `,"status":"Deferred"}`, `}`, 1), false},
		"an unknown member":                            {g, strings.Replace(g, `"phase":"Degraded"`, `"phase":"Degraded","mood":"ok"`, 1), false},
		"a member removed":                             {g, strings.Replace(g, `"lastAppliedGeneration":2,`, ``, 1), true},
		"a member added":                               {strings.Replace(g, `"lastAppliedGeneration":2,`, ``, 1), g, true},
		"an old invalid member kept":                   {stored, strings.Replace(stored, `"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":5`, 1), true},
		"an old invalid member kept in a changed list": {stored, strings.Replace(stored, `"message":"lease renewed within 40s"`, `"message":"x"`, 1), true},
		"an old invalid member made invalid anew":      {stored, strings.Replace(stored, `"reason":"lease renewed"`, `"reason":"still bad"`, 1), false},
		"the status reformatted":                       {g, strings.Replace(g, `"phase":"Degraded"`, `"phase": "Degraded"`, 1), true},
		"a label":                                      {g, strings.Replace(g, `"sandbox-pool.io/class":"default"`, `"sandbox-pool.io/class":"other"`, 1), true},
		"a bad label and a figure":                     {g, strings.Replace(strings.Replace(g, `"sandbox-pool.io/class":"default"`, `"sandbox-pool.io/class":"-bad-"`, 1), `"allocatedMemoryBytes":0`, `"allocatedMemoryBytes":5`, 1), false},
		"the spec":                                     {g, strings.Replace(g, `"cpu":"4"`, `"cpu":"0"`, 1), false},
		"nothing":                                      {g, g, true},
		"the status removed":                           {g, g[:strings.Index(g, `,"status":`)] + "}", false},
		"a status added":                               {g[:strings.Index(g, `,"status":`)] + "}", g, true},
	} {
		t.Run(name, func(t *testing.T) {
			for range 2 { // the second time from the cache
				got := fast.ValidateUpdate(KindSandboxPool, []byte(tc.old), []byte(tc.obj))
				want := long.ValidateUpdate(KindSandboxPool, []byte(tc.old), []byte(tc.obj))
				if (want == nil) != tc.valid {
					t.Fatalf("the long way: %v; want valid=%v", want, tc.valid)
				}
				if (got == nil) != (want == nil) {
					t.Fatalf("fast path: %v; the long way: %v", got, want)
				}
				if got != nil && !slices.Equal(fieldErrors(got), fieldErrors(want)) {
					t.Fatalf("fast path:\n  %s\nthe long way:\n  %s", strings.Join(fieldErrors(got), "\n  "), strings.Join(fieldErrors(want), "\n  "))
				}
			}
		})
	}
}
