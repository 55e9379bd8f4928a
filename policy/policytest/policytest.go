// Package policytest helps tests that need a policy engine or a bundle of their own.
package policytest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcube/sandboxpool/policy"
)

// Manifest is the .manifest of a test bundle with the project's root.
const Manifest = `{"roots": ["sandboxpool"], "rego_version": 1}`

// WriteDir writes files (slash path -> content) under a new temporary directory.
func WriteDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Bundle is an engine option with a one-file bundle whose admission policy is rego.
func Bundle(t testing.TB, rego string) policy.Option {
	t.Helper()
	b, err := policy.LoadBundle(WriteDir(t, map[string]string{
		".manifest":                       Manifest,
		"sandboxpool/admission/main.rego": rego,
	}))
	if err != nil {
		t.Fatalf("LoadBundle: %v", err)
	}
	return policy.WithBundle(b)
}

// NewEngine returns an engine with opts, failing t on error.
func NewEngine(t testing.TB, opts ...policy.Option) *policy.Engine {
	t.Helper()
	e, err := policy.New(context.Background(), opts...)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return e
}
