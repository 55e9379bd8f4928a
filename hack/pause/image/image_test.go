package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func untar(t *testing.T, b []byte) map[string]*tarFile {
	t.Helper()
	files := map[string]*tarFile{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = &tarFile{header: h, data: data}
	}
}

type tarFile struct {
	header *tar.Header
	data   []byte
}

// The archive is an OCI image layout whose every reference resolves and verifies, with
// the binary as /pause, and the same input gives the same bytes.
func TestWriteArchive(t *testing.T) {
	binary := []byte("\x7fELF not really")
	var a, b bytes.Buffer
	if err := WriteArchive(&a, binary, Name); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, binary, Name); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two archives of the same binary differ (%v)", err)
	}
	files := untar(t, a.Bytes())
	blob := func(d ocispec.Descriptor) []byte {
		t.Helper()
		f := files["blobs/sha256/"+d.Digest.Encoded()]
		if f == nil || digest.FromBytes(f.data) != d.Digest || int64(len(f.data)) != d.Size {
			t.Fatalf("blob %s missing or not matching its descriptor", d.Digest)
		}
		return f.data
	}
	if files[ocispec.ImageLayoutFile] == nil {
		t.Fatal("no oci-layout file")
	}
	var index ocispec.Index
	if err := json.Unmarshal(files[ocispec.ImageIndexFile].data, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != Name {
		t.Errorf("image name %q, want %q", got, Name)
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(blob(index.Manifests[0]), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v, %d layers", err, len(manifest.Layers))
	}
	var config ocispec.Image
	if err := json.Unmarshal(blob(manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/pause" || config.OS != "linux" {
		t.Errorf("config %+v, want linux with entrypoint /pause", config)
	}
	layer := blob(manifest.Layers[0])
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest.FromBytes(layer) {
		t.Errorf("diff_ids %v do not name the (uncompressed) layer", config.RootFS.DiffIDs)
	}
	pause := untar(t, layer)["pause"]
	if pause == nil || !bytes.Equal(pause.data, binary) || pause.header.Mode != 0o755 {
		t.Errorf("layer's pause: %+v, want the binary, mode 0755", pause)
	}
}
