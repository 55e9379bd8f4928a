package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentcube/sandboxpool/schema/corpus"
)

// testVersion is the version string the test builds stamp.
const testVersion = "v0.0.0-reproducible"

// twoBuilds are `make images` run twice, as TestBuildIsReproducible runs them.
type twoBuilds struct {
	first, second []Result
	started       [2]time.Time
	// dir holds both builds' outputs and temporary directories.
	dir string
	err error
}

var (
	buildsOnce sync.Once
	builds     twoBuilds
)

// TestMain removes the builds the tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// buildTwice builds every image twice from this checkout, into different directories, at
// different times, with different temporary directories and umasks, once per test binary.
func buildTwice(t *testing.T) twoBuilds {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	buildsOnce.Do(func() {
		root, err := corpus.RepoRoot()
		if err != nil {
			builds.err = err
			return
		}
		dir, err := os.MkdirTemp("", "images-test-")
		if err != nil {
			builds.err = err
			return
		}
		builds.dir = dir
		build := func(n int, tmp string, umask int) ([]Result, error) {
			o := DefaultOptions()
			o.ModuleDir, o.Out, o.Version = root, filepath.Join(dir, "out", string(rune('a'+n))), testVersion
			if err := os.MkdirAll(tmp, 0o755); err != nil {
				return nil, err
			}
			defer os.Setenv("TMPDIR", os.Getenv("TMPDIR"))
			os.Setenv("TMPDIR", tmp)
			defer syscall.Umask(syscall.Umask(umask))
			builds.started[n] = time.Now()
			return Build(context.Background(), o)
		}
		if builds.first, builds.err = build(0, filepath.Join(dir, "tmp-a"), 0o022); builds.err != nil {
			return
		}
		builds.second, builds.err = build(1, filepath.Join(dir, "tmp-b-longer-path"), 0o077)
	})
	if builds.err != nil {
		t.Fatalf("make images: %v", builds.err)
	}
	return builds
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestBuildIsReproducible: two builds of the same checkout, seconds apart, into different
// directories, with different TMPDIRs and umasks, give the same image digests and
// byte-identical archives.
func TestBuildIsReproducible(t *testing.T) {
	b := buildTwice(t)
	if b.started[0].Unix() == b.started[1].Unix() {
		t.Fatalf("both builds started within the second %s: a time stamp in the images would go unnoticed", b.started[0])
	}
	if len(b.first) != len(Images) || len(b.second) != len(Images) {
		t.Fatalf("built %d and %d images, want %d", len(b.first), len(b.second), len(Images))
	}
	for i, r := range b.first {
		s := b.second[i]
		t.Logf("%s %s (%s)", r.Ref, r.Digest, r.Archive)
		if r.Name != s.Name || r.Ref != s.Ref {
			t.Fatalf("build 2 image %d is %s, build 1's %s", i, s.Ref, r.Ref)
		}
		if r.Digest != s.Digest {
			t.Errorf("%s: digest %s, then %s", r.Name, r.Digest, s.Digest)
		}
		if a, b := fileSHA256(t, r.Archive), fileSHA256(t, s.Archive); a != b {
			t.Errorf("%s: archive sha256 %s, then %s", r.Name, a, b)
		}
	}
}

// layerFiles reads the uncompressed layer of a one-layer image.
func layerFiles(t *testing.T, img v1.Image) map[string]*tarEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return untarEntries(t, rc)
}

type tarEntry struct {
	header *tar.Header
	data   []byte
}

func untarEntries(t *testing.T, r io.Reader) map[string]*tarEntry {
	t.Helper()
	files := map[string]*tarEntry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = &tarEntry{header: h, data: data}
	}
}

// TestImagesAreStaticNonRoot: each archive holds one image named after its reference,
// whose only file is its binary at /<name>, the entrypoint, run as the numeric non-root
// User; the binary is static, built with -trimpath, without cgo and without a VCS stamp,
// holds none of the build's paths, and reports the version it was built with.
func TestImagesAreStaticNonRoot(t *testing.T) {
	b := buildTwice(t)
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.Abs(root)
	paths := []string{root, b.dir}
	for _, v := range []string{"GOROOT", "GOMODCACHE", "GOCACHE"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		paths = append(paths, strings.TrimSpace(string(out)))
	}
	for _, r := range b.first {
		t.Run(r.Name, func(t *testing.T) {
			img, ref, cleanup, err := ReadArchive(r.Archive)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			if want := DefaultOptions().Repo + "/" + r.Name + ":" + testVersion; ref != want || r.Ref != want {
				t.Errorf("archive names %q (build said %q), want %q", ref, r.Ref, want)
			}
			if d, err := img.Digest(); err != nil || d != r.Digest {
				t.Errorf("archive's image digest %s (%v), build printed %s", d, err, r.Digest)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Equal(time.Unix(0, 0)) {
				t.Errorf("config: %s/%s created %s, want linux/%s at the epoch", cf.OS, cf.Architecture, cf.Created, runtime.GOARCH)
			}
			if cf.Config.User != User || !slices.Equal(cf.Config.Entrypoint, []string{"/" + r.Name}) || len(cf.Config.Cmd) != 0 {
				t.Errorf("config: user %q, entrypoint %v, cmd %v; want %q, [/%s], none", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd, User, r.Name)
			}
			files := layerFiles(t, img)
			bin := files[r.Name]
			if len(files) != 1 || bin == nil {
				t.Fatalf("layer holds %d files, want only %s", len(files), r.Name)
			}
			if h := bin.header; h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(0, 0)) {
				t.Errorf("%s: mode %o, owner %d:%d (%q:%q), mtime %s; want 0755, 0:0, the epoch", r.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
			}
			checkBinary(t, r.Name, bin.data, paths)
		})
	}
}

// checkBinary: static, built the way the images promise, free of the build's paths, and
// reporting testVersion.
func checkBinary(t *testing.T, name string, binary []byte, paths []string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("%s: not an ELF binary: %v", name, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has program header %s: dynamically linked, want static", name, p.Type)
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("%s: build info: %v", name, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" {
		t.Errorf("%s: built with -trimpath=%q CGO_ENABLED=%q GOOS=%q, want true, 0, linux", name, settings["-trimpath"], settings["CGO_ENABLED"], settings["GOOS"])
	}
	for k := range settings {
		if strings.HasPrefix(k, "vcs") {
			t.Errorf("%s: build info has %s=%s: the VCS state (a modified tree, an untracked file) would change the digest", name, k, settings[k])
		}
	}
	for _, p := range paths {
		if len(p) > 1 && bytes.Contains(binary, []byte(p)) {
			t.Errorf("%s: holds the build machine's path %s", name, p)
		}
	}
	if runtime.GOOS != "linux" {
		return
	}
	exe := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(exe, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != testVersion {
		t.Errorf("%s --version: %q (%v), want %q: -X %s did not reach the binary's version", name, out, err, testVersion, VersionVariable)
	}
}
