package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// smallArchive writes the archive of a one-file image (no compile needed) and returns its
// path and image.
func smallArchive(t *testing.T, name, ref string) (string, v1.Image) {
	t.Helper()
	img, err := Image(name, []byte("#!/not/a/binary\n"), ImageConfig{Version: "v1", Arch: "amd64", Created: time.Unix(0, 0), User: User})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".tar")
	if err := writeArchiveFile(path, img, ref, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	return path, img
}

// TestArchiveLayout: the archive is an OCI image layout whose index.json names the image
// for containerd (full reference) and by the layout's ref.name (the tag), with its
// platform; reading it back gives the same image.
func TestArchiveLayout(t *testing.T) {
	path, img := smallArchive(t, "hello", "example.com/team/hello:v1")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := untarEntries(t, f)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	if files["oci-layout"] == nil || !bytes.Contains(files["oci-layout"].data, []byte(`"imageLayoutVersion":"1.0.0"`)) {
		t.Errorf("oci-layout missing or wrong; files %v", names)
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"].data, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	d := index.Manifests[0]
	want, _ := img.Digest()
	if d.Digest != want || d.Annotations[AnnotationImageName] != "example.com/team/hello:v1" || d.Annotations[AnnotationRefName] != "v1" ||
		d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("index.json's manifest %+v, want %s named example.com/team/hello:v1 (ref.name v1) for linux/amd64", d, want)
	}
	got, ref, cleanup, err := ReadArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if gd, _ := got.Digest(); gd != want || ref != "example.com/team/hello:v1" {
		t.Errorf("read back %s as %q, want %s as example.com/team/hello:v1", gd, ref, want)
	}
	if _, err := got.Layers(); err != nil {
		t.Errorf("layers of the read-back image: %v", err)
	}
}

// TestPush pushes an archive to a real registry (go-containerregistry's, in process) and
// pulls it back: the reference is REGISTRY/<name>:<tag>, and the manifest, config and
// layer are the archive's, byte for byte.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	path, img := smallArchive(t, "sandboxpool-webhook", "ghcr.io/agentcube/sandboxpool-webhook:v1.2.3")
	ctx := context.Background()
	p, err := Push(ctx, path, PushOptions{Registry: u.Host + "/mirror/team", Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	wantRef := u.Host + "/mirror/team/sandboxpool-webhook:v1.2.3"
	wantDigest, _ := img.Digest()
	if p.Ref != wantRef || p.Digest != wantDigest {
		t.Errorf("pushed %s %s, want %s %s", p.Ref, p.Digest, wantRef, wantDigest)
	}
	ref, err := name.ParseReference(wantRef)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", wantRef, err)
	}
	for what, pair := range map[string][2]func() ([]byte, error){
		"manifest": {img.RawManifest, pulled.RawManifest},
		"config":   {img.RawConfigFile, pulled.RawConfigFile},
		"layer":    {compressedLayer(img), compressedLayer(pulled)},
	} {
		a, errA := pair[0]()
		b, errB := pair[1]()
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: pushed and pulled differ (%v, %v)", what, errA, errB)
		}
	}
}

func compressedLayer(img v1.Image) func() ([]byte, error) {
	return func() ([]byte, error) {
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
}

// TestPushRejectsBadRegistry: an empty or trailing-slash REGISTRY is an error that names
// it, before anything is read or sent.
func TestPushRejectsBadRegistry(t *testing.T) {
	// A good archive, so that the registry is all that is wrong.
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image("app", []byte("binary"), ImageConfig{Version: "1", Arch: "amd64", Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(f, img, "ghcr.io/agentcube/app:1", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, reg := range []string{"", "registry.example.com/"} {
		_, err := Push(context.Background(), path, PushOptions{Registry: reg})
		if err == nil || !strings.Contains(err.Error(), "want a repository prefix") {
			t.Errorf("registry %q: %v, want an error asking for a repository prefix", reg, err)
		}
	}
}
