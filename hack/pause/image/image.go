// Package image builds the project's local pause image: a one-layer OCI image whose only
// file is the static hack/pause binary, written as an OCI image-layout archive that
// `ctr images import` loads. No registry is involved, so the tests and the local stack work
// offline; containerd's CRI is pinned to it as the sandbox image (deploy/containerd).
package image

import (
	"archive/tar"
	"bytes"
	"context"
	_ "crypto/sha256" // digest.FromBytes needs it registered
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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
// binary as /pause.
func WriteArchive(w io.Writer, binary []byte, ref string) error {
	layer, err := tarball(entry{name: "pause", mode: 0o755, data: binary})
	if err != nil {
		return err
	}
	layerDesc := descriptor(ocispec.MediaTypeImageLayer, layer)
	config, err := json.Marshal(ocispec.Image{
		Created:  &epoch,
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   ocispec.ImageConfig{Entrypoint: []string{"/pause"}},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor(ocispec.MediaTypeImageConfig, config)
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    []ocispec.Descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor(ocispec.MediaTypeImageManifest, manifest)
	manifestDesc.Platform = &ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name": ref,
		ocispec.AnnotationRefName:  tag,
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	})
	if err != nil {
		return err
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return err
	}

	archive, err := tarball(
		entry{name: ocispec.ImageLayoutFile, mode: 0o644, data: layout},
		entry{name: ocispec.ImageIndexFile, mode: 0o644, data: index},
		blob(layerDesc, layer), blob(configDesc, config), blob(manifestDesc, manifest),
	)
	if err != nil {
		return err
	}
	_, err = w.Write(archive)
	return err
}

type entry struct {
	name string
	mode int64
	data []byte
}

func blob(d ocispec.Descriptor, data []byte) entry {
	return entry{name: "blobs/" + d.Digest.Algorithm().String() + "/" + d.Digest.Encoded(), mode: 0o644, data: data}
}

func descriptor(mediaType string, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

// tarball is a tar of regular files, with the directories their names need.
func tarball(entries ...entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, e := range entries {
		for d := filepath.Dir(e.name); d != "."; d = filepath.Dir(d) {
			if dirs[d] {
				break
			}
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) { // parents sort before their children
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
