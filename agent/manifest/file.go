package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// File names.
const (
	// FilePrefix starts the name of every manifest file.
	FilePrefix = "sandbox-pool-"
	// FileSuffix ends the name of every manifest file.
	FileSuffix = ".yaml"
	// FilePattern matches every manifest file (filepath.Match syntax).
	FilePattern = FilePrefix + "*" + FileSuffix

	// MaxFileKeyLength is the longest pool name used verbatim in a file name. It leaves
	// room in the 255 bytes of a file name for the prefix, the suffix and the temporary
	// names of Write ("." + name + ".tmp-" + up to 10 digits).
	MaxFileKeyLength = 200

	// tempInfix separates a temporary file's target name from its random suffix.
	tempInfix = ".tmp-"
	// fileKeyHashLength is how many hex characters of SHA-256(pool) end a shortened key.
	fileKeyHashLength = 8
	// maxFileSize bounds what Parse accepts and Read reads. Manifests are a few KiB;
	// annotations are limited to 256 KiB in all.
	maxFileSize = 1 << 20
	// fileMode is the mode of every manifest: kubelet (root) writes nothing, everyone reads.
	fileMode fs.FileMode = 0o644
)

// Errors of Parse and Verify. Test with errors.Is.
var (
	// ErrNotManifest marks a file that is not a placeholder pod manifest: not YAML, not a
	// v1 Pod, or without the pool annotations and the placeholder container.
	ErrNotManifest = errors.New("not a placeholder pod manifest")
	// ErrModified marks a manifest whose bytes are not what Render produced: edited by
	// hand, or its manifest-hash does not match its content.
	ErrModified = errors.New("manifest modified since it was rendered")
)

// FileKey is the pool's part of its file name: the pool name itself, or, for a name
// longer than MaxFileKeyLength characters, its first 191 characters, "-" and the first 8
// hex characters of its SHA-256. FileKey(FileKey(p)) == FileKey(p).
func FileKey(pool string) string {
	if len(pool) <= MaxFileKeyLength {
		return pool
	}
	return pool[:MaxFileKeyLength-1-fileKeyHashLength] + "-" + hashOf([]byte(pool))[:fileKeyHashLength]
}

// FileName is the base name of the manifest of pool: "sandbox-pool-" + FileKey(pool) +
// ".yaml".
func FileName(pool string) string {
	return FilePrefix + FileKey(pool) + FileSuffix
}

// PoolFromFileName returns the file key (see FileKey) in a manifest's base name, and false
// for a name that is not a manifest's. For pool names up to MaxFileKeyLength characters the
// key is the pool name.
func PoolFromFileName(name string) (string, bool) {
	key, ok := strings.CutPrefix(name, FilePrefix)
	if !ok {
		return "", false
	}
	key, ok = strings.CutSuffix(key, FileSuffix)
	if !ok || key == "" || strings.ContainsRune(key, filepath.Separator) {
		return "", false
	}
	return key, true
}

// File is one manifest as read from disk.
type File struct {
	// Path is where the file was read.
	Path string
	// PoolName and PoolUID are the sandbox-pool.io/pool-name and /pool-uid annotations.
	PoolName string
	PoolUID  string
	// Hash is the sandbox-pool.io/manifest-hash annotation, as found (see Verify).
	Hash string
	// Resources are the requests of the placeholder container: what the scheduler and
	// kubelet count against the node.
	Resources corev1.ResourceList
	// Data is the file's content.
	Data []byte
}

// Read reads and parses the manifest at path (see Parse).
func Read(path string) (File, error) {
	data, err := readAtMost(path, maxFileSize+1)
	if err != nil {
		return File{}, fmt.Errorf("reading manifest %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses data, the content of the manifest at path. It fails with an error wrapping
// ErrNotManifest unless data is a v1 Pod with non-empty sandbox-pool.io/pool-name and
// /pool-uid annotations and a container named ContainerName, and, when path is a
// manifest's file name, unless that name is the one of the pool in the annotation. Parse
// does not check the hash; Verify does.
func Parse(path string, data []byte) (File, error) {
	pod, err := decode(data)
	if err != nil {
		return File{}, fmt.Errorf("parsing manifest %s: %w: %w", path, ErrNotManifest, err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return File{}, fmt.Errorf("parsing manifest %s: %w: apiVersion %q, kind %q, want v1 Pod",
			path, ErrNotManifest, pod.APIVersion, pod.Kind)
	}
	f := File{
		Path:     path,
		PoolName: pod.Annotations[v1alpha1.AnnotationPoolName],
		PoolUID:  pod.Annotations[v1alpha1.AnnotationPoolUID],
		Hash:     pod.Annotations[v1alpha1.AnnotationManifestHash],
		Data:     data,
	}
	for _, key := range []string{v1alpha1.AnnotationPoolName, v1alpha1.AnnotationPoolUID} {
		if pod.Annotations[key] == "" {
			return File{}, fmt.Errorf("parsing manifest %s: %w: no annotation %s", path, ErrNotManifest, key)
		}
	}
	if key, ok := PoolFromFileName(filepath.Base(path)); ok && key != FileKey(f.PoolName) {
		return File{}, fmt.Errorf("parsing manifest %s: %w: the file name is not the one of pool %q (annotation %s)",
			path, ErrNotManifest, f.PoolName, v1alpha1.AnnotationPoolName)
	}
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == ContainerName {
			f.Resources = c.Resources.Requests
			return f, nil
		}
	}
	return File{}, fmt.Errorf("parsing manifest %s: %w: no container %q", path, ErrNotManifest, ContainerName)
}

// Verify reports, with a nil error, that f.Data is byte for byte a manifest Render
// produced: its manifest-hash annotation matches its content, and nothing was added,
// removed or reformatted (a comment, a blank line, a field kubelet would ignore). Any other
// outcome is an error wrapping ErrModified, or ErrNotManifest when f.Data does not parse.
func (f File) Verify() error {
	pod, err := decode(f.Data)
	if err != nil {
		return fmt.Errorf("verifying manifest %s: %w: %w", f.Path, ErrNotManifest, err)
	}
	got := pod.Annotations[v1alpha1.AnnotationManifestHash]
	if got == "" {
		return fmt.Errorf("verifying manifest %s: %w: no annotation %s", f.Path, ErrModified, v1alpha1.AnnotationManifestHash)
	}
	delete(pod.Annotations, v1alpha1.AnnotationManifestHash)
	unhashed, err := marshal(pod)
	if err != nil {
		return fmt.Errorf("verifying manifest %s: %w", f.Path, err)
	}
	if want := hashOf(unhashed); got != want {
		return fmt.Errorf("verifying manifest %s: %w: %s is %s, the content hashes to %s",
			f.Path, ErrModified, v1alpha1.AnnotationManifestHash, got, want)
	}
	pod.Annotations[v1alpha1.AnnotationManifestHash] = got
	canonical, err := marshal(pod)
	if err != nil {
		return fmt.Errorf("verifying manifest %s: %w", f.Path, err)
	}
	if !bytes.Equal(canonical, f.Data) {
		return fmt.Errorf("verifying manifest %s: %w: the hash matches, but the file is not as rendered", f.Path, ErrModified)
	}
	return nil
}

// List reads every manifest (FilePattern) in dir, in name order. A file that cannot be read
// or parsed is left out of the files and reported in the errors. A missing dir has no
// manifests.
func List(dir string) ([]File, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{fmt.Errorf("listing manifests in %s: %w", dir, err)}
	}
	var (
		files []File
		errs  []error
	)
	for _, e := range entries {
		if _, ok := PoolFromFileName(e.Name()); !ok {
			continue
		}
		f, err := Read(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, f)
	}
	return files, errs
}

// decode parses a manifest's YAML into a Pod; it refuses anything bigger than a manifest
// can be.
func decode(data []byte) (*corev1.Pod, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// readAtMost reads the first n bytes of the file at path, or all of it when it is shorter.
func readAtMost(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}
