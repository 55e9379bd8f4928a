// Command crdgen writes deploy/crds/ from the CUE schema (make generate).
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
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
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
	return nil
}
