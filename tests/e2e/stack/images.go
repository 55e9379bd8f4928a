package stack

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/agentcube/sandboxpool/hack/images/oci"
	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// The cluster half's images are the OCI archives of `make images` (hack/images/oci), which
// the stack imports into the node's containerd, as a node without a registry gets them
// (`ctr -n k8s.io images import`); the Deployments then find them there (imagePullPolicy
// IfNotPresent, the default for a tagged image).

// BuildImages builds the images of this checkout, stamped version, into dir (what
// `make images VERSION=version IMAGES_DIR=dir` does).
func BuildImages(ctx context.Context, dir, version string) error {
	o := oci.DefaultOptions()
	o.Out, o.Version = dir, version
	root, err := corpus.RepoRoot()
	if err != nil {
		return err
	}
	o.ModuleDir = root
	_, err = oci.Build(ctx, o)
	return err
}

// ImageRefs reads the references of the images in dir (make images' archives), by image
// name.
func ImageRefs(dir string) (map[string]string, error) {
	refs := map[string]string{}
	for _, spec := range oci.Images {
		_, ref, cleanup, err := oci.ReadArchive(oci.ArchivePath(dir, spec.Name))
		if err != nil {
			return nil, fmt.Errorf("image %s (make images): %w", spec.Name, err)
		}
		cleanup()
		refs[spec.Name] = ref
	}
	return refs, nil
}

// ImportImages imports the images in dir into the node's containerd and returns their
// references by image name.
func (s *Stack) ImportImages(ctx context.Context, dir string) (map[string]string, error) {
	refs, err := ImageRefs(dir)
	if err != nil {
		return nil, err
	}
	for _, spec := range oci.Images {
		archive := oci.ArchivePath(dir, spec.Name)
		if out, err := s.Ctr(ctx, "-n", containerdtest.CRINamespace, "images", "import", archive); err != nil {
			return nil, fmt.Errorf("importing %s: %w: %s", archive, err, out)
		}
	}
	return refs, nil
}

// imagesDir is where the stack's images are: Options.Images, else built into Dir/images.
func (s *Stack) imagesDir(ctx context.Context) (string, error) {
	if s.Opts.Images != "" {
		return filepath.Abs(s.Opts.Images)
	}
	dir := filepath.Join(s.Opts.Dir, "images")
	s.Opts.Logf("building the controller and webhook images into %s", dir)
	return dir, BuildImages(ctx, dir, "e2e")
}

// ImagesDir holds the archives of the images the stack runs (Options.Images, or the ones it
// built).
func (s *Stack) ImagesDir() string { return s.imagesToImport }
