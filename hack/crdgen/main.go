// Command crdgen writes deploy/crds/ from the CUE schema, and the field docs of the Go API
// types from the same docs (make generate).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/crdgen"
)

func main() {
	out := flag.String("out", "deploy/crds", "directory to write the CRD YAML files to")
	goTypes := flag.String("go-types", "", "Go file of the API types whose field docs to rewrite from the schema (none when empty)")
	flag.Parse()
	if err := run(*out, *goTypes); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(out, goTypes string) error {
	s, err := schema.Compiled()
	if err != nil {
		return err
	}
	crds, err := crdgen.Generate(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, crd := range crds {
		b, err := crdgen.Marshal(crd)
		if err != nil {
			return err
		}
		name := filepath.Join(out, crd.Spec.Group+"_"+crd.Spec.Names.Plural+".yaml")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	if goTypes == "" {
		return nil
	}
	src, err := os.ReadFile(goTypes)
	if err != nil {
		return fmt.Errorf("reading the Go types: %w", err)
	}
	documented, err := crdgen.GoDocs(s, src)
	if err != nil {
		return fmt.Errorf("%s: %w", goTypes, err)
	}
	if err := os.WriteFile(goTypes, documented, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", goTypes, err)
	}
	return nil
}
