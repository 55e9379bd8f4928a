// Package schema embeds the CUE definitions of the SandboxPool API (the *.cue files beside
// this one), compiles them once, and validates and defaults objects with them. It is the
// only place the rules live: the CRDs are generated from the same files (schema/crdgen), the
// API server enforces them in the cluster, and the operator, the agent and sandboxpool vet
// call this package instead of restating rules in Go.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/load"
	cuejson "cuelang.org/go/encoding/json"
)

//go:embed *.cue
var files embed.FS

// Kind names an object kind defined in the schema.
type Kind string

// The kinds of the API, named as their CUE definitions (#SandboxPoolClass, #SandboxPool).
const (
	KindSandboxPoolClass Kind = "SandboxPoolClass"
	KindSandboxPool      Kind = "SandboxPool"
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{KindSandboxPoolClass, KindSandboxPool}

// Definition is the CUE path of the kind's definition, e.g. "#SandboxPool".
func (k Kind) Definition() string { return "#" + string(k) }

// Schema is the compiled CUE schema. It is safe for concurrent use. CUE values are not, so
// evaluations run on a pool of independent evaluators (each its own CUE context, built from
// its own load of the files), at most GOMAXPROCS of them, created on demand.
type Schema struct {
	srcs map[string][]byte // the CUE files, by name, each evaluator compiles
	root cue.Value         // first evaluator's package value, for Lookup by single-threaded tools
	idle chan *evaluator
	// immutable are the fields each kind marks @crd(immutable) (ImmutableFields).
	immutable map[Kind][]string

	// rules are what the schema allows at each place of an object of each kind, read once:
	// the words of the error messages (messages.go).
	rules map[Kind]*ruleNode

	mu   sync.Mutex // guards made and serialises the creation of evaluators
	made int
}

// evaluator is one compiled copy of the schema; only one goroutine uses it at a time.
type evaluator struct {
	ctx  *cue.Context
	root cue.Value
	defs map[Kind]cue.Value
}

var (
	compileOnce sync.Once
	compiled    *Schema
	compileErr  error
)

// Compiled returns the schema compiled from the embedded CUE files. The files are compiled
// on the first call only.
func Compiled() (*Schema, error) {
	compileOnce.Do(func() { compiled, compileErr = compile() })
	return compiled, compileErr
}

// MustCompiled is Compiled for callers that cannot go on without the schema (mains, tests).
// The embedded files are tested in this package, so it only fails on a broken build.
func MustCompiled() *Schema {
	s, err := Compiled()
	if err != nil {
		panic(err)
	}
	return s
}

// Files returns the embedded CUE sources, by file name.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		out[p] = b
		return err
	})
	return out, err
}

func compile() (*Schema, error) {
	srcs, err := Files()
	if err != nil {
		return nil, fmt.Errorf("reading embedded schema: %w", err)
	}
	return Compile(srcs)
}

// Compile compiles a schema from CUE files (name -> content) laid out as the embedded ones:
// one package holding #SandboxPoolClass and #SandboxPool. Compiled is Compile of the
// embedded files, once; other sources serve tools and tests that need another version of
// the API, such as an older release's rules in an upgrade test.
func Compile(srcs map[string][]byte) (*Schema, error) {
	first, err := newEvaluator(srcs)
	if err != nil {
		return nil, err
	}
	s := &Schema{srcs: srcs, root: first.root, idle: make(chan *evaluator, max(1, runtime.GOMAXPROCS(0))), made: 1,
		immutable: map[Kind][]string{}, rules: map[Kind]*ruleNode{}}
	for _, k := range Kinds {
		s.immutable[k] = immutableFields(first.defs[k])
		s.rules[k] = rulesOf(first.defs[k], 0)
	}
	s.idle <- first
	return s, nil
}

// newEvaluator loads and compiles the files into a new CUE context.
func newEvaluator(srcs map[string][]byte) (*evaluator, error) {
	const dir = "/sandboxpool/schema"
	overlay := map[string]load.Source{}
	for name, b := range srcs {
		overlay[path.Join(dir, name)] = load.FromBytes(b)
	}
	insts := load.Instances([]string{"."}, &load.Config{Dir: dir, Overlay: overlay})
	if len(insts) != 1 {
		return nil, fmt.Errorf("loading embedded schema: want 1 instance, got %d", len(insts))
	}
	if err := insts[0].Err; err != nil {
		return nil, fmt.Errorf("loading embedded schema: %w", err)
	}
	ctx := cuecontext.New()
	root := ctx.BuildInstance(insts[0])
	if err := root.Err(); err != nil {
		return nil, fmt.Errorf("compiling schema: %w", err)
	}
	e := &evaluator{ctx: ctx, root: root, defs: map[Kind]cue.Value{}}
	for _, k := range Kinds {
		v := root.LookupPath(cue.ParsePath(k.Definition()))
		if err := v.Err(); err != nil {
			return nil, fmt.Errorf("schema has no %s: %w", k.Definition(), err)
		}
		e.defs[k] = v
	}
	return e, nil
}

// acquire takes an idle evaluator, creates one while fewer than cap(idle) exist, or waits.
func (s *Schema) acquire() (*evaluator, error) {
	select {
	case e := <-s.idle:
		return e, nil
	default:
	}
	s.mu.Lock()
	if s.made < cap(s.idle) {
		defer s.mu.Unlock()
		e, err := newEvaluator(s.srcs)
		if err != nil {
			return nil, err
		}
		s.made++
		return e, nil
	}
	s.mu.Unlock()
	return <-s.idle, nil
}

func (s *Schema) release(e *evaluator) { s.idle <- e }

// KindOf is the kind of value v's constraints allow (bottom aside). A struct validator such
// as struct.MinFields(1) on a field (status?: #SandboxPoolStatus & struct.MinFields(1))
// fails on the schema itself, where the struct has no fields yet, so CUE reports the
// field's kind as bottom until an object fills it; its kind is then that of its conjuncts.
func KindOf(v cue.Value) cue.Kind {
	if k := v.IncompleteKind() &^ cue.BottomKind; k != 0 {
		return k
	}
	if d := cue.Dereference(v); d != v {
		return KindOf(d) // a reference (resources!: #ResourceQuota) to such a value
	}
	op, args := v.Expr()
	if op != cue.AndOp {
		return 0
	}
	k := cue.TopKind
	for _, a := range args {
		k &= a.IncompleteKind()
	}
	return k &^ cue.BottomKind
}

// Lookup returns the value at a CUE path of the schema package (e.g. "#Kinds"), for tools
// that read the schema itself, such as the CRD generator. The caller must not evaluate it
// concurrently with other calls on this Schema.
func (s *Schema) Lookup(p string) cue.Value {
	return s.root.LookupPath(cue.ParsePath(p))
}

// FieldError is one violated rule: the field path, dotted as in kubectl explain (list
// indexes in brackets), and what the rule demands.
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) String() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// ValidationError lists every rule an object breaks.
type ValidationError struct {
	Kind   Kind
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		msgs[i] = f.String()
	}
	return fmt.Sprintf("invalid %s: %s", e.Kind, strings.Join(msgs, "; "))
}

// Default validates a JSON object of the kind against the schema and returns it as JSON
// with every schema default filled in. A *ValidationError names each broken rule.
func (s *Schema) Default(kind Kind, obj []byte) ([]byte, error) {
	if !slices.Contains(Kinds, kind) {
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	expr, err := cuejson.Extract(string(kind)+".json", obj)
	if err != nil {
		return nil, &ValidationError{Kind: kind, Fields: []FieldError{{Msg: "not a JSON object: " + err.Error()}}}
	}
	e, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.release(e)
	v := e.defs[kind].Unify(e.ctx.BuildExpr(expr))
	if err := v.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return nil, s.validationError(kind, violationsOf(err), obj)
	}
	out, err := v.MarshalJSON()
	if err != nil {
		return nil, s.validationError(kind, violationsOf(err), obj)
	}
	return out, nil
}

// Validate reports whether a JSON object of the kind satisfies the schema.
func (s *Schema) Validate(kind Kind, obj []byte) error {
	_, err := s.Default(kind, obj)
	return err
}

// violation is one error CUE reported: the selectors of the value it is about (starting
// with the definition, as CUE reports them) and its message.
type violation struct {
	path []string
	msg  string
}

// violationsOf lists the errors in err.
func violationsOf(err error) []violation {
	var out []violation
	for _, e := range cueerrors.Errors(err) {
		format, args := e.Msg()
		out = append(out, violation{path: e.Path(), msg: fmt.Sprintf(format, args...)})
	}
	return out
}

// validationError turns CUE's errors about obj into one field error per bad field, worded
// as the API server words its own (messages.go).
func (s *Schema) validationError(kind Kind, vs []violation, obj []byte) *ValidationError {
	byPath := map[string][]string{}
	sels := map[string][]string{}
	var order []string
	for _, v := range vs {
		p := fieldPath(v.path)
		if _, seen := byPath[p]; !seen {
			order = append(order, p)
			sels[p] = v.path
		}
		byPath[p] = append(byPath[p], v.msg)
	}
	ve := &ValidationError{Kind: kind}
	for _, p := range order {
		value, present := valueAt(obj, sels[p])
		ve.Fields = append(ve.Fields, s.rules[kind].fieldError(sels[p], byPath[p], value, present))
	}
	return ve
}

func fieldPath(sels []string) string {
	var b strings.Builder
	for _, s := range sels {
		if strings.HasPrefix(s, "#") {
			continue // the definition itself, e.g. #SandboxPool
		}
		if s != "" && s[0] >= '0' && s[0] <= '9' {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.Trim(s, `"`))
	}
	return b.String()
}
