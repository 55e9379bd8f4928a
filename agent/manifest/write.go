package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Write replaces the manifest of piece of pool in dir with data, atomically: data goes to a hidden
// temporary file in dir, which is synced, given mode 0644 and renamed over the manifest;
// then dir itself is synced. A reader (kubelet) sees the old file or the new one, never a
// part of either, and after a crash the file is one or the other. On failure the temporary
// file is removed. dir must exist: creating it could hide a --manifest-dir that kubelet does
// not read.
func Write(dir, pool string, piece int, data []byte) error {
	if err := checkRef(pool, piece); err != nil {
		return fmt.Errorf("writing manifest of pool %q: %w", pool, err)
	}
	path := filepath.Join(dir, FileName(pool, piece))
	if err := writeAtomic(dir, FileName(pool, piece), data); err != nil {
		return fmt.Errorf("writing manifest %s: %w", path, err)
	}
	return nil
}

// Ensure makes the manifest of piece of pool in dir hold exactly want, and reports whether it had
// to write: when the file is missing, differs from want in any byte, is not a regular file
// or does not have mode 0644. An identical file is left alone (same inode, same mtime), so
// kubelet sees no change. This is the agent's self-heal; it also ends the echo of the
// agent's own writes through Watch.
func Ensure(dir, pool string, piece int, want []byte) (rewritten bool, err error) {
	if err := checkRef(pool, piece); err != nil {
		return false, fmt.Errorf("ensuring manifest of pool %q: %w", pool, err)
	}
	if same(filepath.Join(dir, FileName(pool, piece)), want) {
		return false, nil
	}
	if err := Write(dir, pool, piece, want); err != nil {
		return false, err
	}
	return true, nil
}

// same reports whether path is a regular file of mode 0644 holding exactly want. Any error
// counts as a difference: rewriting is how the agent repairs it.
func same(path string, want []byte) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != fileMode || fi.Size() != int64(len(want)) {
		return false
	}
	have, err := readAtMost(path, int64(len(want))+1)
	return err == nil && bytes.Equal(have, want)
}

// Remove deletes the manifests of the given pieces of pool from dir, in the order given,
// then syncs dir once; kubelet then stops their pods and deletes their mirror pods. A
// missing file is not an error.
func Remove(dir, pool string, pieces ...int) error {
	removed := false
	for _, piece := range pieces {
		if err := checkRef(pool, piece); err != nil {
			return fmt.Errorf("removing manifest of pool %q: %w", pool, err)
		}
		path := filepath.Join(dir, FileName(pool, piece))
		if err := os.Remove(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("removing manifest %s: %w", path, err)
		}
		removed = true
	}
	if !removed {
		return nil
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("removing manifests of pool %q: %w", pool, err)
	}
	return nil
}

// RemovePool deletes every manifest of pool from dir (each piece, and the single file of
// agents before pieces).
func RemovePool(dir, pool string) error {
	if err := checkPoolName(pool); err != nil {
		return fmt.Errorf("removing the manifests of pool %q: %w", pool, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing the manifests of pool %q: %w", pool, err)
	}
	var pieces []int
	for _, e := range entries {
		if key, piece, ok := ParseFileName(e.Name()); ok && key == FileKey(pool) {
			pieces = append(pieces, piece)
		}
	}
	return Remove(dir, pool, pieces...)
}

// checkRef refuses a pool name that is not an object name and a negative piece.
func checkRef(pool string, piece int) error {
	if piece < 0 {
		return fmt.Errorf("invalid piece %d", piece)
	}
	return checkPoolName(pool)
}

// checkPoolName refuses a pool name that is not an object name: the name becomes part of a
// path, and "../x" must never leave the manifest directory.
func checkPoolName(pool string) error {
	if pool == "" {
		return errors.New("empty pool name")
	}
	if msgs := validation.IsDNS1123Subdomain(pool); len(msgs) > 0 {
		return fmt.Errorf("invalid pool name: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// tempPattern is the os.CreateTemp pattern of the temporary files for the manifest name:
// hidden, so kubelet never reads them, and never matching FilePattern.
func tempPattern(name string) string {
	return "." + name + tempInfix + "*"
}

// isTempName reports whether name is a temporary file of Write.
func isTempName(name string) bool {
	target, ok := strings.CutPrefix(name, ".")
	if !ok {
		return false
	}
	i := strings.LastIndex(target, tempInfix)
	if i < 0 {
		return false
	}
	_, ok = PoolFromFileName(target[:i])
	return ok
}

func writeAtomic(dir, name string, data []byte) error {
	tmp, err := writeTemp(dir, name, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// writeTemp writes data to a new hidden temporary file for the manifest name in dir, synced
// and of mode 0644, and returns its path. On failure nothing is left behind.
func writeTemp(dir, name string, data []byte) (path string, err error) {
	tmp, err := os.CreateTemp(dir, tempPattern(name))
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return "", err
	}
	// CreateTemp makes 0600 files and the umask applies to OpenFile: set the mode itself.
	if err = tmp.Chmod(fileMode); err != nil {
		return "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", err
	}
	if err = tmp.Close(); err != nil {
		return "", err
	}
	return tmp.Name(), nil
}

// Replace removes the manifests of the pieces old of pool and writes piece's with data in
// their place, with as little as the file system allows between the two: data is first
// written and synced to a hidden temporary file, then the old files are removed and the
// temporary file renamed into place, one call after the other, and dir is synced once.
// kubelet, which takes each file event on its own, sees the removals and the new file as
// consecutive updates. On failure before the removals nothing has changed.
func Replace(dir, pool string, old []int, piece int, data []byte) error {
	if err := checkRef(pool, piece); err != nil {
		return fmt.Errorf("replacing manifests of pool %q: %w", pool, err)
	}
	for _, o := range old {
		if err := checkRef(pool, o); err != nil {
			return fmt.Errorf("replacing manifests of pool %q: %w", pool, err)
		}
	}
	name := FileName(pool, piece)
	tmp, err := writeTemp(dir, name, data)
	if err != nil {
		return fmt.Errorf("writing manifest %s: %w", filepath.Join(dir, name), err)
	}
	for _, o := range old {
		if err := os.Remove(filepath.Join(dir, FileName(pool, o))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(tmp)
			return fmt.Errorf("removing manifest %s: %w", filepath.Join(dir, FileName(pool, o)), err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing manifest %s: %w", filepath.Join(dir, name), err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("replacing manifests of pool %q: %w", pool, err)
	}
	return nil
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
