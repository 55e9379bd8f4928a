package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse and Verify arbitrary bytes: they return errors, never panic, and a
// file that verifies is exactly what its own content renders to.
func FuzzParse(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "placeholder-pod.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{
		golden,
		golden[:len(golden)/2],
		bytes.ReplaceAll(golden, []byte("  "), []byte("\t")),
		nil,
		[]byte("{}"),
		[]byte("null"),
		[]byte("apiVersion: v1\nkind: Pod\n"),
		[]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations: {sandbox-pool.io/pool-name: a, sandbox-pool.io/pool-uid: b}\nspec:\n  containers: [{name: placeholder}]\n"),
		[]byte("a: &a [*a, *a]\n"),
		[]byte("- - - - - - -\n"),
		[]byte("spec: {containers: [{name: placeholder, resources: {requests: {cpu: 1e999999}}}]}"),
		[]byte("\xff\xfe\x00"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := (File{Data: data}).Verify(); err == nil && !bytes.HasPrefix(data, []byte(header)) {
			t.Fatalf("Verify accepted a file without the header:\n%s", data)
		}
		file, err := Parse(FileName("a", 1), data)
		if err != nil {
			if !errors.Is(err, ErrNotManifest) {
				t.Fatalf("Parse error %v does not wrap ErrNotManifest", err)
			}
			return
		}
		if file.PoolName == "" || file.PoolUID == "" {
			t.Fatalf("Parse accepted a manifest without pool annotations: %+v", file)
		}
	})
}

// TestReadGarbageFiles: Read of files that are not manifests, including a file larger
// than any manifest, fails with an error that names the path.
func TestReadGarbageFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"sandbox-pool-binary.yaml": {0, 1, 2, 0xff},
		"sandbox-pool-huge.yaml":   bytes.Repeat([]byte("a: b\n"), maxFileSize/4),
		"sandbox-pool-empty.yaml":  nil,
	} {
		path := writeRaw(t, dir, name, data)
		if _, err := Read(path); !errors.Is(err, ErrNotManifest) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Errorf("%s: Read = %v, want ErrNotManifest naming the path", name, err)
		}
	}
}
