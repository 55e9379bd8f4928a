package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const pool = "placeholder-node-a"

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	long := bytes.Repeat([]byte("long content\n"), 1000)
	short := []byte("short\n")
	path := filepath.Join(dir, FileName(pool, 1))

	old := syscall.Umask(0o077) // a strict umask must not make the file unreadable
	defer syscall.Umask(old)
	for _, data := range [][]byte{long, short} {
		if err := Write(dir, pool, 1, data); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("file holds %d bytes, want the %d written (content replaced fully)", len(got), len(data))
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o644 {
			t.Errorf("mode %v, want -rw-r--r--", fi.Mode())
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{FileName(pool, 1)}) {
			t.Errorf("directory holds %v, want only the manifest (no temporary file left)", names)
		}
	}
}

// TestWriteFailure makes the final rename fail (the manifest's name is taken by a
// directory): Write reports it with the path, and leaves no temporary file.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, FileName(pool, 1))
	if err := os.MkdirAll(filepath.Join(blocker, "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := Write(dir, pool, 1, []byte("data"))
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("Write = %v, want an error naming %s", err, blocker)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{FileName(pool, 1)}) {
		t.Errorf("directory holds %v after a failed write", names)
	}
	if _, err := os.Stat(filepath.Join(blocker, "child")); err != nil {
		t.Errorf("the failed write damaged what was there: %v", err)
	}

	missing := filepath.Join(dir, "missing")
	if err := Write(missing, pool, 1, []byte("data")); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Write into a missing dir = %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("Write created the missing dir: %v", err)
	}
}

// TestWriteRejectsBadPoolNames: a pool name never leads out of the directory.
func TestWriteRejectsBadPoolNames(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "../escape", "a/b", "UPPER", ".hidden", "a..b"} {
		if err := Write(dir, name, 1, []byte("x")); err == nil {
			t.Errorf("Write(%q) succeeded", name)
		}
		if _, err := Ensure(dir, name, 1, []byte("x")); err == nil {
			t.Errorf("Ensure(%q) succeeded", name)
		}
		if err := Remove(dir, name, 1); err == nil {
			t.Errorf("Remove(%q) succeeded", name)
		}
	}
	if names := dirNames(t, root); !slices.Equal(names, []string{"manifests"}) {
		t.Errorf("files appeared next to the manifest dir: %v", names)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("files appeared in the manifest dir: %v", names)
	}
}

// TestWriteAtomic: a reader racing with writes of two contents sees one or the other,
// never an empty, partial or mixed file.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	a := bytes.Repeat([]byte("a"), 64<<10)
	b := bytes.Repeat([]byte("b"), 32<<10)
	if err := Write(dir, pool, 1, a); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName(pool, 1))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read during writes: %v", err)
				return
			}
			if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
				t.Errorf("read a torn file of %d bytes", len(got))
				return
			}
		}
	})
	for i := range 100 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := Write(dir, pool, 1, data); err != nil {
			t.Error(err)
			break
		}
	}
	close(done)
	wg.Wait()
}

func TestEnsure(t *testing.T) {
	data := mustRender(t, testSpec())
	type id struct {
		ino   uint64
		mtime time.Time
	}
	stat := func(t *testing.T, path string) id {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return id{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()}
	}
	cases := []struct {
		name    string
		prepare func(t *testing.T, path string) // the state before Ensure
		rewrite bool
	}{
		{"missing", func(t *testing.T, path string) {}, true},
		{"identical", func(t *testing.T, path string) {}, false},
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"one byte edited", func(t *testing.T, path string) {
			edited := bytes.Replace(data, []byte("cpu: \"4\""), []byte("cpu: \"5\""), 1)
			if err := os.WriteFile(path, edited, 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, int64(len(data)/2)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"appended", func(t *testing.T, path string) {
			if err := os.WriteFile(path, append(slices.Clone(data), '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"mode changed", func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"replaced by a symlink", func(t *testing.T, path string) {
			target := path + ".target"
			if err := os.Rename(path, target); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, FileName(pool, 1))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare(t, path)
			var before id
			if _, err := os.Stat(path); err == nil {
				// An old mtime, so that a rewrite within the clock's granularity shows too.
				old := time.Now().Add(-time.Hour).Truncate(time.Second)
				if err := os.Chtimes(path, old, old); err != nil {
					t.Fatal(err)
				}
				before = stat(t, path)
			}
			rewritten, err := Ensure(dir, pool, 1, data)
			if err != nil {
				t.Fatal(err)
			}
			if rewritten != tc.rewrite {
				t.Errorf("rewritten = %v, want %v", rewritten, tc.rewrite)
			}
			after := stat(t, path)
			if !tc.rewrite && after != before {
				t.Errorf("an identical file was touched: %+v, then %+v", before, after)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
				t.Errorf("after Ensure the file holds %d bytes (%v), want the %d wanted", len(got), err, len(data))
			}
			if fi, err := os.Lstat(path); err != nil || fi.Mode() != 0o644 {
				t.Errorf("after Ensure: %v, %v; want a regular file of mode 0644", fi.Mode(), err)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, pool, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, dir, "sandbox-pool-placeholder-node-b.yaml", []byte("y"))
	for range 2 { // idempotent
		if err := Remove(dir, pool, 1); err != nil {
			t.Fatal(err)
		}
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"sandbox-pool-placeholder-node-b.yaml"}) {
		t.Errorf("directory holds %v, want only the other pool's manifest", names)
	}
	if err := Remove(filepath.Join(dir, "missing"), pool, 1); err != nil {
		t.Errorf("Remove in a missing dir: %v", err)
	}
}

// TestReplace: the old pieces go and the new one is in place, with no temporary file left;
// a write that fails before the removals changes nothing.
func TestReplace(t *testing.T) {
	dir := t.TempDir()
	for _, piece := range []int{1, 2} {
		if err := Write(dir, pool, piece, []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	if err := Replace(dir, pool, []int{1, 2}, 3, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{FileName(pool, 3)}) {
		t.Errorf("directory holds %v, want only piece 3", names)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, FileName(pool, 3))); string(got) != "new" {
		t.Errorf("piece 3 holds %q", got)
	}
	missing := filepath.Join(dir, "missing")
	if err := Replace(missing, pool, []int{3}, 4, []byte("x")); err == nil {
		t.Error("Replace into a missing directory succeeded")
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{FileName(pool, 3)}) {
		t.Errorf("a failed Replace changed the directory: %v", names)
	}
}
