// Package policy is the embedded OPA engine that evaluates the SandboxPool admission
// policy (package bundles) for the webhook.
//
// An Engine loads a bundle once, prepares the deny query once and evaluates it for each
// AdmissionRequest against an in-memory store that holds data.config (Config) and
// data.inventory.pools (PoolRef by pool name). An evaluation error, an undefined result or
// a result of the wrong shape is returned as an error, never as an allow.
package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/agentcube/sandboxpool/bundles"
)

// Query is a Rego query the engine prepares.
type Query string

// DenyQuery is the policy's entry point: the set of {"field", "msg"} violations of
// input.request. An empty set allows the request.
const DenyQuery Query = "data.sandboxpool.admission.deny"

// Errors of Evaluate. Both mean the policy could not decide: the webhook answers 500.
var (
	// ErrUndefined is returned when the deny query has no value for a request.
	ErrUndefined = errors.New("policy result is undefined")
	// ErrIllTyped is returned when the deny query's value is not a set of violations.
	ErrIllTyped = errors.New("policy result is not a set of {field, msg} objects")
)

// Engine evaluates admission requests. It is safe for concurrent use: evaluations read
// the store in read transactions, and SetConfig, SetInventory, UpsertPool and DeletePool
// write it in write transactions (the store serialises them).
type Engine struct {
	store storage.Store
	query rego.PreparedEvalQuery
	// terms keeps the input's terms of recent objects (input.go): the objects of one
	// request mostly repeat those of the requests before it.
	terms *terms

	// mu serialises inventory writes and guards inv, the engine's copy of data.inventory
	// from which it derives each write of the data.inventory.nodes index.
	mu  sync.Mutex
	inv inventory
}

// Option configures New.
type Option func(*options)

type options struct {
	bundle         *bundle.Bundle
	config         Config
	inventory      map[string]PoolRef
	runtimeClasses bool
}

// WithBundle evaluates b (see LoadBundle) instead of the embedded bundle.
func WithBundle(b *bundle.Bundle) Option { return func(o *options) { o.bundle = b } }

// WithConfig sets data.config; the default is DefaultConfig().
func WithConfig(c Config) Option { return func(o *options) { o.config = c } }

// WithInventory sets the initial data.inventory.pools.
func WithInventory(pools map[string]PoolRef) Option {
	return func(o *options) { o.inventory = pools }
}

// WithRuntimeClasses makes the engine check the RuntimeClass a class or pool names against
// data.inventory.runtime_classes (UpsertRuntimeClass, DeleteRuntimeClass), which starts out
// empty and not synced: until SetRuntimeClassesSynced, every request that names a
// RuntimeClass is denied. Without it (sandboxpool vet, offline) the check is skipped.
func WithRuntimeClasses() Option { return func(o *options) { o.runtimeClasses = true } }

// New loads the bundle, checks that it defines DenyQuery and prepares the query.
func New(ctx context.Context, opts ...Option) (*Engine, error) {
	o := options{config: DefaultConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.config.Validate(); err != nil {
		return nil, err
	}
	b := o.bundle
	if b == nil {
		var err error
		if b, err = LoadEmbedded(); err != nil {
			return nil, err
		}
	}
	if err := checkRoots(b); err != nil {
		return nil, err
	}
	ref, err := ast.ParseRef(string(DenyQuery))
	if err != nil {
		return nil, fmt.Errorf("parsing query %s: %w", DenyQuery, err)
	}

	inv := newInventory(o.inventory)
	if o.runtimeClasses {
		inv.runtimeClasses = map[string]string{}
	}
	store := inmem.NewFromObjectWithOpts(map[string]any{
		dataConfig:    o.config.value(),
		dataInventory: inv.value(),
	}, inmem.OptReturnASTValuesOnRead(true))

	// Preparing activates the bundle in the store (its manifest under data.system), which
	// needs a write transaction of the caller's.
	compiler := ast.NewCompiler()
	var query rego.PreparedEvalQuery
	err = storage.Txn(ctx, store, storage.WriteParams, func(txn storage.Transaction) error {
		var err error
		query, err = rego.New(
			rego.Query(string(DenyQuery)),
			rego.ParsedBundle(bundles.Root, b),
			rego.Store(store),
			rego.Transaction(txn),
			rego.Compiler(compiler),
			rego.SetRegoVersion(ast.RegoV1),
		).PrepareForEval(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("preparing %s: %w", DenyQuery, err)
	}
	if len(compiler.GetRulesExact(ref)) == 0 {
		return nil, fmt.Errorf("bundle does not define %s", DenyQuery)
	}
	return &Engine{store: store, query: query, terms: newTerms(), inv: inv}, nil
}

// Evaluate decides req. It returns an error, never an allow, when the policy cannot
// decide: evaluation errors, ErrUndefined and ErrIllTyped.
func (e *Engine) Evaluate(ctx context.Context, req *admissionv1.AdmissionRequest) (Decision, error) {
	if req == nil {
		return Decision{}, errors.New("evaluating admission policy: no admission request")
	}
	// OPA notices cancellation only now and then; a request whose deadline has passed is
	// not evaluated at all.
	if err := ctx.Err(); err != nil {
		return Decision{}, fmt.Errorf("evaluating admission policy: %w", err)
	}
	input, err := inputOf(req, e.terms)
	if err != nil {
		return Decision{}, fmt.Errorf("evaluating admission policy: %w", err)
	}
	rs, err := e.query.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return Decision{}, fmt.Errorf("evaluating %s: %w", DenyQuery, err)
	}
	violations, err := decode(rs)
	if err != nil {
		return Decision{}, fmt.Errorf("evaluating %s: %w", DenyQuery, err)
	}
	return Decision{Allowed: len(violations) == 0, Violations: violations}, nil
}

func decode(rs rego.ResultSet) ([]Violation, error) {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, ErrUndefined
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return nil, fmt.Errorf("%w: %d results", ErrIllTyped, len(rs))
	}
	items, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: got %T", ErrIllTyped, rs[0].Expressions[0].Value)
	}
	violations := make([]Violation, 0, len(items))
	for _, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: element %v", ErrIllTyped, item)
		}
		field, fieldOK := m["field"].(string)
		msg, msgOK := m["msg"].(string)
		if !fieldOK || !msgOK || field == "" || msg == "" {
			return nil, fmt.Errorf("%w: element %v", ErrIllTyped, item)
		}
		violations = append(violations, Violation{Field: field, Msg: msg})
	}
	sortViolations(violations)
	return violations, nil
}

// SetConfig replaces data.config.
func (e *Engine) SetConfig(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := storage.WriteOne(ctx, e.store, storage.ReplaceOp, storage.Path{dataConfig}, c.value()); err != nil {
		return fmt.Errorf("writing data.%s: %w", dataConfig, err)
	}
	return nil
}
