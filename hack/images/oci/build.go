// Package oci builds the project's container images (`make images`) and pushes them
// (`make push`). Each image is one static Go binary of this module in one layer, on no base
// image, run as a numeric non-root user; it is written as an OCI image-layout archive that
// `ctr images import` and containerd's CRI load, so no registry and no Docker daemon is
// involved. Nothing of the build's circumstances reaches an image: every time stamp is
// Options.Created, every file's owner and mode are fixed, the binaries are built with
// -trimpath and without VCS stamping, and the archive's entries are sorted. The same
// sources, Go toolchain and version string therefore give the same digests
// (docs/operator-guide.md, "Images").
package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is one image: the main package built into it, and its name, which is both the
// binary's name (at /Name in the image, its entrypoint) and the last element of its
// repository.
type Spec struct {
	Name    string
	Package string
}

// Images are the cluster components, the Deployments of deploy/. The node's parts
// (placeholder-agent, node-ctl, the containerd shim) are not images: they are host services
// that systemd starts (deploy/node) beside kubelet and containerd, and the shim is a binary
// containerd itself executes.
var Images = []Spec{
	{Name: ControllerImage, Package: "./cmd/sandboxpool-controller"},
	{Name: WebhookImage, Package: "./cmd/sandboxpool-webhook"},
}

// The images' names (deploy/controller and deploy/webhook run them).
const (
	ControllerImage = "sandboxpool-controller"
	WebhookImage    = "sandboxpool-webhook"
)

// User is the numeric user:group the images run as, distroless' "nonroot". Numeric, so
// the kubelet can verify runAsNonRoot without an /etc/passwd in the image; the Deployments'
// securityContext.runAsUser/runAsGroup name the same ids.
const User = "65532:65532"

// VersionVariable is the string variable of every cmd/ main package that -ldflags -X sets
// to Options.Version; the binaries report it (--version, their start-up log line).
const VersionVariable = "main.version"

// Source is the images' org.opencontainers.image.source label.
const Source = "https://github.com/agentcube/sandboxpool"

// Options configure Build.
type Options struct {
	// ModuleDir is the root of the module the packages are built from.
	ModuleDir string
	// Out is the directory the archives are written to (created if missing).
	Out string
	// Repo is the repository prefix of the image references, e.g. ghcr.io/agentcube.
	Repo string
	// Version is the image tag and the binaries' version string.
	Version string
	// Arch is the GOARCH built for (linux only).
	Arch string
	// Created is every time stamp in the images and archives.
	Created time.Time
	// Images are the images built; Images when empty.
	Images []Spec
}

// DefaultOptions builds every image for this machine's architecture, stamped with the Unix
// epoch.
func DefaultOptions() Options {
	return Options{ModuleDir: ".", Out: "_output/images", Repo: "ghcr.io/agentcube", Version: "dev",
		Arch: runtime.GOARCH, Created: time.Unix(0, 0).UTC(), Images: Images}
}

// Result is one built image.
type Result struct {
	Spec
	// Ref is the image's reference (Repo/Name:Version), the name it is imported as.
	Ref string
	// Digest is the image manifest's digest: the image's identity in a registry and in
	// containerd.
	Digest v1.Hash
	// Archive is the OCI image-layout archive's path.
	Archive string
}

// Build compiles every image's package in one `go build` (static, -trimpath, no VCS
// stamp, the version set) and writes each image's archive to Out/<name>.tar.
func Build(ctx context.Context, o Options) ([]Result, error) {
	specs := o.Images
	if len(specs) == 0 {
		specs = Images
	}
	if err := validate(o, specs); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "sandboxpool-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	if err := compile(ctx, o, specs, binDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(specs))
	for _, s := range specs {
		binary, err := os.ReadFile(filepath.Join(binDir, s.Name))
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		r := Result{Spec: s, Ref: o.Repo + "/" + s.Name + ":" + o.Version, Archive: ArchivePath(o.Out, s.Name)}
		img, err := Image(s.Name, binary, ImageConfig{Version: o.Version, Arch: o.Arch, Created: o.Created, User: User})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		if r.Digest, err = img.Digest(); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		if err := writeArchiveFile(r.Archive, img, r.Ref, o.Created); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// ArchivePath is where Build writes the archive of the image name in dir.
func ArchivePath(dir, name string) string { return filepath.Join(dir, name+".tar") }

func validate(o Options, specs []Spec) error {
	switch {
	case o.Repo == "" || strings.HasSuffix(o.Repo, "/"):
		return fmt.Errorf("repo %q: want a repository prefix such as ghcr.io/agentcube", o.Repo)
	case o.Version == "" || strings.ContainsAny(o.Version, ":/@ "):
		return fmt.Errorf("version %q: it is the image tag, so it must be non-empty, without ':', '/', '@' or spaces", o.Version)
	case o.Arch == "":
		return fmt.Errorf("arch: empty, want a GOARCH such as %s", runtime.GOARCH)
	}
	for _, s := range specs {
		if s.Name == "" || strings.ContainsAny(s.Name, "/: ") || s.Package == "" {
			return fmt.Errorf("image %+v: want a name without '/', ':' or spaces and a package", s)
		}
	}
	return nil
}

// compile builds the specs' packages into binDir. The environment is set, not inherited,
// where it shapes the binary: no cgo (static), linux/Arch, and no GOFLAGS from the caller's
// environment (a -race or -cover there would change the binary; a GOFLAGS written with
// `go env -w` still applies, which an empty variable does not override). The flags given
// here win over either.
func compile(ctx context.Context, o Options, specs []Spec, binDir string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X " + VersionVariable + "=" + o.Version, "-o", binDir + string(filepath.Separator)}
	for _, s := range specs {
		args = append(args, s.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	// go build names each binary after its package's directory; the images use Spec.Name.
	for _, s := range specs {
		if built := filepath.Join(binDir, filepath.Base(s.Package)); built != filepath.Join(binDir, s.Name) {
			if err := os.Rename(built, filepath.Join(binDir, s.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImageConfig is what an image carries besides its binary.
type ImageConfig struct {
	Version string
	Arch    string
	Created time.Time
	// User is the image's user:group; empty is the runtime's default, root.
	User string
}

// Image is the one-layer image that runs binary as /name, as c.User, on linux/c.Arch.
func Image(name string, binary []byte, c ImageConfig) (v1.Image, error) {
	created := v1.Time{Time: c.Created.UTC()}
	layerTar, err := tarOf(c.Created, file{name: name, mode: 0o755, data: binary})
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: c.Arch,
		OS:           "linux",
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{"/" + name},
			User:       c.User,
			Labels: map[string]string{
				"org.opencontainers.image.title":   name,
				"org.opencontainers.image.version": c.Version,
				"org.opencontainers.image.source":  Source,
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "make images: " + name + " " + c.Version},
	})
}

// file is a regular file of a tar.
type file struct {
	name string
	mode int64
	data []byte
}

// tarOf is a tar of files in the given order, each owned by 0:0 with the given mode and
// modTime, preceded by the directories their names need (mode 0755, parents first).
func tarOf(modTime time.Time, files ...file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, f := range files {
		var dirs []string
		for d := filepath.Dir(f.name); d != "." && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			h := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: modTime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: modTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
