package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/agentcube/sandboxpool/bundles"
)

// testFileSuffix marks Rego unit tests; they are not loaded into the engine.
const testFileSuffix = "_test.rego"

// LoadEmbedded reads the bundle compiled into the binary (package bundles), without its
// *_test.rego files.
func LoadEmbedded() (*bundle.Bundle, error) {
	loader, err := bundle.NewFSLoader(bundles.FS())
	if err != nil {
		return nil, fmt.Errorf("opening the embedded bundle: %w", err)
	}
	b, err := read(loader)
	if err != nil {
		return nil, fmt.Errorf("reading the embedded bundle: %w", err)
	}
	return b, nil
}

// LoadBundle reads a bundle from path: a directory laid out like bundles/ (a .manifest at
// the top), or a gzipped tarball such as `opa build -b bundles` writes. Operators use it to
// ship a policy update without rebuilding the webhook. *_test.rego files are skipped.
func LoadBundle(path string) (*bundle.Bundle, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("loading bundle %s: %w", path, err)
	}
	if info.IsDir() {
		b, err := read(bundle.NewDirectoryLoader(path))
		if err != nil {
			return nil, fmt.Errorf("loading bundle directory %s: %w", path, err)
		}
		return b, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading bundle %s: %w", path, err)
	}
	defer f.Close()
	b, err := read(bundle.NewTarballLoaderWithBaseURL(f, path))
	if err != nil {
		return nil, fmt.Errorf("loading bundle tarball %s: %w", path, err)
	}
	return b, nil
}

func read(loader bundle.DirectoryLoader) (*bundle.Bundle, error) {
	b, err := bundle.NewCustomReader(loader.WithFilter(skipTests)).
		WithRegoVersion(ast.RegoV1).
		Read()
	if err != nil {
		return nil, err
	}
	return &b, nil
}

func skipTests(_ string, info fs.FileInfo, _ int) bool {
	return info != nil && !info.IsDir() && strings.HasSuffix(info.Name(), testFileSuffix)
}

// checkRoots makes sure a bundle cannot own data.config or data.inventory: activating a
// bundle erases everything under its roots, and a manifest without roots owns all of data.
func checkRoots(b *bundle.Bundle) error {
	if b.Manifest.Roots == nil {
		return errors.New("bundle manifest declares no roots; want roots under " + bundles.Root)
	}
	for _, root := range *b.Manifest.Roots {
		if root != bundles.Root && !strings.HasPrefix(root, bundles.Root+"/") {
			return fmt.Errorf("bundle root %q is outside %s (data.config and data.inventory are the engine's)", root, bundles.Root)
		}
	}
	return nil
}
