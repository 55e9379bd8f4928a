// Package image builds the project's local images: the pause image, a one-layer OCI image
// whose only file is the static hack/pause binary, and the load image (hack/load, the
// co-located pods of the delivery tests), each written as an OCI image-layout archive that
// `ctr images import` loads. No registry is involved, so the tests and the local stack work
// offline; containerd's CRI is pinned to the pause image as the sandbox image
// (deploy/containerd).
package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/agentcube/sandboxpool/hack/images/oci"
)

// Name is the image's reference.
const Name = "localhost/sandbox-pool/pause:1.0"

// LoadName is the load image's reference: hack/load as /load.
const LoadName = "localhost/sandbox-pool/load:1.0"

// The binaries the images run.
const (
	pausePackage = "github.com/agentcube/sandboxpool/hack/pause"
	loadPackage  = "github.com/agentcube/sandboxpool/hack/load"
)

// epoch is the time stamp of every file, so the same binary gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Build compiles hack/pause (static, for this machine's architecture) and writes the pause
// image's archive to path. It runs `go build`, so it must run inside the module (tests do).
func Build(ctx context.Context, path string) error {
	return build(ctx, path, pausePackage, Name)
}

// BuildLoad does the same for the load image (LoadName).
func BuildLoad(ctx context.Context, path string) error {
	return build(ctx, path, loadPackage, LoadName)
}

func build(ctx context.Context, path, pkg, ref string) error {
	dir, err := os.MkdirTemp("", "image-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Base(pkg)
	bin := filepath.Join(dir, file)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, strings.TrimSpace(string(out)))
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeArchive(f, file, binary, ref); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WriteArchive writes an OCI image-layout archive of a one-layer image named ref that runs
// binary as /pause (as root, as a sandbox image does), in the format of the project's
// images (hack/images/oci).
func WriteArchive(w io.Writer, binary []byte, ref string) error {
	return writeArchive(w, "pause", binary, ref)
}

// writeArchive writes the archive of an image that runs binary as /file.
func writeArchive(w io.Writer, file string, binary []byte, ref string) error {
	img, err := oci.Image(file, binary, oci.ImageConfig{Version: ref[strings.LastIndex(ref, ":")+1:], Arch: runtime.GOARCH, Created: epoch})
	if err != nil {
		return err
	}
	return oci.WriteArchive(w, img, ref, epoch)
}
