package bundles_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/agentcube/sandboxpool/bundles"
)

// coverageFloor is the minimum Rego test coverage, in percent, that CI accepts (as
// check.sh does with the opa binary).
const coverageFloor = 90

func readBundle(t *testing.T) *bundle.Bundle {
	t.Helper()
	loader, err := bundle.NewFSLoader(bundles.FS())
	if err != nil {
		t.Fatalf("opening the embedded bundle: %v", err)
	}
	b, err := bundle.NewCustomReader(loader).Read()
	if err != nil {
		t.Fatalf("reading the embedded bundle: %v", err)
	}
	return &b
}

// TestManifest checks the manifest the OPA CLI and the webhook both rely on.
func TestManifest(t *testing.T) {
	raw, err := fs.ReadFile(bundles.FS(), ".manifest")
	if err != nil {
		t.Fatalf("reading .manifest: %v", err)
	}
	var m struct {
		Roots       []string `json:"roots"`
		RegoVersion *int     `json:"rego_version"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("parsing .manifest: %v", err)
	}
	if len(m.Roots) != 1 || m.Roots[0] != bundles.Root {
		t.Errorf("roots = %v, want [%s]", m.Roots, bundles.Root)
	}
	if m.RegoVersion == nil || *m.RegoVersion != 1 {
		t.Errorf("rego_version = %v, want 1", m.RegoVersion)
	}
}

// TestEveryPolicyHasTests checks that each policy file has a *_test.rego beside it.
func TestEveryPolicyHasTests(t *testing.T) {
	policies, err := fs.Glob(bundles.FS(), bundles.Root+"/*/*.rego")
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) == 0 {
		t.Fatal("no policies embedded")
	}
	for _, p := range policies {
		if strings.HasSuffix(p, "_test.rego") {
			continue
		}
		test := strings.TrimSuffix(p, ".rego") + "_test.rego"
		if _, err := fs.Stat(bundles.FS(), test); err != nil {
			t.Errorf("%s has no test file %s", p, test)
		}
	}
}

// TestRego runs every *_test.rego of the embedded bundle through OPA's tester, so that
// `go test` fails on a broken policy without the opa binary, and enforces the coverage floor.
func TestRego(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b := readBundle(t)
	store := inmem.New()
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		t.Fatalf("opening a store transaction: %v", err)
	}
	defer store.Abort(ctx, txn)

	cov := cover.New()
	compiler := ast.NewCompiler()
	runner := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetBundles(map[string]*bundle.Bundle{bundles.Root: b}).
		SetDefaultRegoVersion(ast.RegoV1).
		SetCoverageQueryTracer(cov).
		SetTimeout(30 * time.Second)
	results, err := runner.RunTests(ctx, txn)
	if err != nil {
		t.Fatalf("compiling the bundle and its tests: %v", err)
	}

	var passed int
	for r := range results {
		name := r.Package + "." + r.Name
		switch {
		case r.Error != nil:
			t.Errorf("%s: error: %v", name, r.Error)
		case r.Skip:
			t.Logf("%s: skipped", name)
		case r.Fail:
			t.Errorf("%s: FAIL (%s)", name, r.Location)
		default:
			passed++
		}
	}
	if passed == 0 {
		t.Fatal("no Rego tests ran")
	}
	t.Logf("%d Rego tests passed", passed)

	report := cov.Report(compiler.Modules)
	t.Logf("Rego coverage %.1f %%", report.Coverage)
	if report.Coverage < coverageFloor {
		for file, fr := range report.Files {
			for _, r := range fr.NotCovered {
				t.Logf("not covered: %s:%d-%d", file, r.Start.Row, r.End.Row)
			}
		}
		t.Errorf("Rego coverage %.1f %% is below the floor of %d %%", report.Coverage, coverageFloor)
	}
}
