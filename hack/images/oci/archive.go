package oci

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the index.json entry: containerd names an imported image after
// AnnotationImageName (the full reference); the OCI layout's own ref.name is the tag.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// WriteArchive writes img as an OCI image-layout tar (oci-layout, index.json naming img as
// ref, and the blobs), its entries sorted by name, each stamped with modTime and owned by
// 0:0.
func WriteArchive(w io.Writer, img v1.Image, ref string, modTime time.Time) error {
	// Parsed to check it has a tag, and written as given: go-containerregistry would add
	// index.docker.io/ to a name such as localhost/x:1, which containerd takes as is.
	tag, err := name.NewTag(ref)
	if err != nil || !strings.HasSuffix(ref, ":"+tag.TagStr()) {
		return fmt.Errorf("image reference %q: want <repository>:<tag> (%w)", ref, err)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	desc, err := descriptorOf(img)
	if err != nil {
		return err
	}
	desc.Platform = &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
	desc.Annotations = map[string]string{AnnotationImageName: ref, AnnotationRefName: tag.TagStr()}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{*desc}})
	if err != nil {
		return err
	}
	files := []file{
		{name: "oci-layout", mode: 0o644, data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", mode: 0o644, data: index},
		blobFile(desc.Digest, manifest),
		blobFile(configName, config),
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		files = append(files, blobFile(d, data))
	}
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	files = slices.CompactFunc(files, func(a, b file) bool { return a.name == b.name }) // a blob two layers share
	b, err := tarOf(modTime, files...)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func writeArchiveFile(path string, img v1.Image, ref string, modTime time.Time) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := WriteArchive(f, img, ref, modTime); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func descriptorOf(img v1.Image) (*v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	size, err := img.Size()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

func blobFile(d v1.Hash, data []byte) file {
	return file{name: "blobs/" + d.Algorithm + "/" + d.Hex, mode: 0o644, data: data}
}

// ReadArchive reads an archive WriteArchive wrote: its one image and the reference it is
// named by. The archive is unpacked into a temporary directory that the image reads its
// blobs from; cleanup removes it (call it once the image is no longer used).
func ReadArchive(path string) (img v1.Image, ref string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "sandboxpool-image-")
	if err != nil {
		return nil, "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if err := untar(path, dir); err != nil {
		return nil, "", nil, fmt.Errorf("archive %s: %w", path, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", nil, fmt.Errorf("archive %s: %w", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", nil, fmt.Errorf("archive %s: %w", path, err)
	}
	if len(im.Manifests) != 1 {
		return nil, "", nil, fmt.Errorf("archive %s: index.json has %d manifests, want the one image make images writes", path, len(im.Manifests))
	}
	desc := im.Manifests[0]
	if ref = desc.Annotations[AnnotationImageName]; ref == "" {
		return nil, "", nil, fmt.Errorf("archive %s: index.json's manifest has no %s annotation", path, AnnotationImageName)
	}
	if img, err = idx.Image(desc.Digest); err != nil {
		return nil, "", nil, fmt.Errorf("archive %s: %w", path, err)
	}
	return img, ref, cleanup, nil
}

// untar unpacks the regular files and directories of the tar at path below dir, refusing
// names that would leave it.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q: outside the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %c, want a file or directory", h.Name, h.Typeflag)
		}
	}
}
