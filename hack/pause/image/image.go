// Package image builds the project's local pause image: a one-layer OCI image whose only
// file is the static hack/pause binary, written as an OCI image-layout archive that
// `ctr images import` loads. No registry is involved, so the tests and the local stack work
// offline; containerd's CRI is pinned to it as the sandbox image (deploy/containerd).
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

// pausePackage is the binary the image runs.
const pausePackage = "github.com/agentcube/sandboxpool/hack/pause"

// epoch is the time stamp of every file, so the same binary gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Build compiles hack/pause (static, for this machine's architecture) and writes the image
// archive to path. It runs `go build`, so it must run inside the module (tests do).
func Build(ctx context.Context, path string) error {
	dir, err := os.MkdirTemp("", "pause-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pausePackage, err, strings.TrimSpace(string(out)))
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteArchive(f, binary, Name); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WriteArchive writes an OCI image-layout archive of a one-layer image named ref that runs
// binary as /pause (as root, as a sandbox image does), in the format of the project's
// images (hack/images/oci).
func WriteArchive(w io.Writer, binary []byte, ref string) error {
	img, err := oci.Image("pause", binary, oci.ImageConfig{Version: ref[strings.LastIndex(ref, ":")+1:], Arch: runtime.GOARCH, Created: epoch})
	if err != nil {
		return err
	}
	return oci.WriteArchive(w, img, ref, epoch)
}
