package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
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

// FileKey is the pool's part of its file names: the pool name itself, or, for a name
// longer than MaxFileKeyLength characters, its first 191 characters, "-" and the first 8
// hex characters of its SHA-256. FileKey(FileKey(p)) == FileKey(p).
func FileKey(pool string) string {
	if len(pool) <= MaxFileKeyLength {
		return pool
	}
	return pool[:MaxFileKeyLength-1-fileKeyHashLength] + "-" + hashOf([]byte(pool))[:fileKeyHashLength]
}

// pieceSeparator separates the pool's key from the piece number in a file name. Pool names
// are DNS subdomains, which never hold it, so the split is unambiguous.
const pieceSeparator = "_"

// FileName is the base name of the manifest of piece of pool: "sandbox-pool-" +
// FileKey(pool) + "_" + piece + ".yaml". Piece 0 is the name of the single manifest that
// agents before pieces wrote, "sandbox-pool-" + FileKey(pool) + ".yaml": Read and List
// still read it, and the agent replaces it like any other piece.
func FileName(pool string, piece int) string {
	if piece == 0 {
		return FilePrefix + FileKey(pool) + FileSuffix
	}
	return FilePrefix + FileKey(pool) + pieceSeparator + strconv.Itoa(piece) + FileSuffix
}

// ParseFileName returns the file key (see FileKey) and the piece number in a manifest's
// base name, and false for a name that is not a manifest's. For pool names up to
// MaxFileKeyLength characters the key is the pool name.
func ParseFileName(name string) (key string, piece int, ok bool) {
	key, ok = strings.CutPrefix(name, FilePrefix)
	if !ok {
		return "", 0, false
	}
	key, ok = strings.CutSuffix(key, FileSuffix)
	if !ok || key == "" || strings.ContainsRune(key, filepath.Separator) {
		return "", 0, false
	}
	i := strings.LastIndex(key, pieceSeparator)
	if i < 0 {
		return key, 0, true
	}
	n, err := strconv.Atoi(key[i+1:])
	if err != nil || n <= 0 || strconv.Itoa(n) != key[i+1:] || i == 0 {
		return "", 0, false
	}
	return key[:i], n, true
}

// PoolFromFileName returns the file key in a manifest's base name (see ParseFileName).
func PoolFromFileName(name string) (string, bool) {
	key, _, ok := ParseFileName(name)
	return key, ok
}

// PodName is metadata.name of the static pod of piece: v1alpha1.PlaceholderPodName + "-" +
// piece (kubelet appends "-" + the node name for the mirror pod). Each piece has a name of
// its own, so kubelet never holds a new piece back until an older pod of the same name has
// stopped. Piece 0, the single pod of agents before pieces, is v1alpha1.PlaceholderPodName.
func PodName(piece int) string {
	if piece == 0 {
		return v1alpha1.PlaceholderPodName
	}
	return v1alpha1.PlaceholderPodName + "-" + strconv.Itoa(piece)
}

// File is one manifest as read from disk.
type File struct {
	// Path is where the file was read.
	Path string
	// PoolName and PoolUID are the sandbox-pool.io/pool-name and /pool-uid annotations.
	PoolName string
	PoolUID  string
	// Piece is the piece number in the file name; PodName(Piece) is the pod's name.
	Piece int
	// Hash is the sandbox-pool.io/manifest-hash annotation, as found (see Verify).
	Hash string
	// UID is metadata.uid, the static pod's UID on the node (see Render); empty in the
	// manifests of agents before it was set, whose UID kubelet hashes itself.
	UID types.UID
	// Resources are the requests of the placeholder container: what the scheduler and
	// kubelet count against the node.
	Resources corev1.ResourceList
	// Data is the file's content.
	Data []byte
	// ModTime is when the file was last written (Read sets it; Parse leaves it zero).
	ModTime time.Time
}

// Read reads and parses the manifest at path (see Parse).
func Read(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, fmt.Errorf("reading manifest %s: %w", path, err)
	}
	data, err := readAtMost(path, maxFileSize+1)
	if err != nil {
		return File{}, fmt.Errorf("reading manifest %s: %w", path, err)
	}
	f, err := Parse(path, data)
	if err != nil {
		return File{}, err
	}
	f.ModTime = fi.ModTime()
	return f, nil
}

// Parse parses data, the content of the manifest at path. It fails with an error wrapping
// ErrNotManifest unless data is a v1 Pod with non-empty sandbox-pool.io/pool-name and
// /pool-uid annotations and a container named ContainerName, and, when path is a
// manifest's file name, unless that name is the one of the pool in the annotation and the
// pod's name is PodName of the piece in the file name. Parse does not check the hash; Verify
// does.
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
		UID:      pod.UID,
		Data:     data,
	}
	for _, key := range []string{v1alpha1.AnnotationPoolName, v1alpha1.AnnotationPoolUID} {
		if pod.Annotations[key] == "" {
			return File{}, fmt.Errorf("parsing manifest %s: %w: no annotation %s", path, ErrNotManifest, key)
		}
	}
	if key, piece, ok := ParseFileName(filepath.Base(path)); ok {
		if key != FileKey(f.PoolName) {
			return File{}, fmt.Errorf("parsing manifest %s: %w: the file name is not the one of pool %q (annotation %s)",
				path, ErrNotManifest, f.PoolName, v1alpha1.AnnotationPoolName)
		}
		if pod.Name != PodName(piece) {
			return File{}, fmt.Errorf("parsing manifest %s: %w: the pod is named %q, the file is the one of %q",
				path, ErrNotManifest, pod.Name, PodName(piece))
		}
		f.Piece = piece
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
	uid := pod.UID
	pod.UID = ""
	if want, err := staticPodUID(pod); err != nil || uid != want {
		return fmt.Errorf("verifying manifest %s: %w: metadata.uid is %q, not the one its content gives (%q)", f.Path, ErrModified, uid, want)
	}
	pod.UID = uid
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
	return readDir(dir, func(string) bool { return true })
}

// Pieces reads the manifests of pool in dir, in piece order: each file whose name has
// FileKey(pool) and whose annotation names pool. A file that cannot be read or parsed is
// left out and reported in the errors. A missing dir has no manifests.
func Pieces(dir, pool string) ([]File, []error) {
	all, errs := readDir(dir, func(key string) bool { return key == FileKey(pool) })
	var files []File
	for _, f := range all {
		if f.PoolName == pool {
			files = append(files, f)
		}
	}
	slices.SortFunc(files, func(a, b File) int { return a.Piece - b.Piece })
	return files, errs
}

// readDir reads the manifests in dir whose file key passes want, in name order.
func readDir(dir string, want func(key string) bool) ([]File, []error) {
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
		if key, ok := PoolFromFileName(e.Name()); !ok || !want(key) {
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
