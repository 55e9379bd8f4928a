package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentcube/sandboxpool/hack/images/oci"
)

// The archive holds one image named Name that runs the binary as /pause, as root, and the
// same input gives the same bytes.
func TestWriteArchive(t *testing.T) {
	binary := []byte("\x7fELF not really")
	var a, b bytes.Buffer
	if err := WriteArchive(&a, binary, Name); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, binary, Name); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two archives of the same binary differ (%v)", err)
	}
	path := filepath.Join(t.TempDir(), "pause.tar")
	if err := os.WriteFile(path, a.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	img, ref, cleanup, err := oci.ReadArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if ref != Name {
		t.Errorf("image name %q, want %q", ref, Name)
	}
	config, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Config.Entrypoint, []string{"/pause"}) || config.Config.User != "" || config.OS != "linux" {
		t.Errorf("config %+v, want linux with entrypoint /pause, as root", config.Config)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Name != "pause" || !bytes.Equal(data, binary) || h.Mode != 0o755 {
			t.Errorf("layer entry %s (mode %o), want only pause, the binary, mode 0755", h.Name, h.Mode)
		}
		found = found || h.Name == "pause"
	}
	if !found {
		t.Error("layer has no pause")
	}
}
