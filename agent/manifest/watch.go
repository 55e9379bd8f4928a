package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// coalesceWindow is how long Watch gathers events before it reports them: an editor's
// save, or Write's rename, is one call per pool, not one per event.
const coalesceWindow = 100 * time.Millisecond

// Watch reports changes to the manifests in dir until ctx is done, and then returns nil.
//
// onChange(key) is called after a manifest was created, written, removed, renamed or had
// its mode changed; key is PoolFromFileName of the file (the pool name, unless longer than
// MaxFileKeyLength: compare FileKey of a pool's name). Events within 100 ms are coalesced:
// one call per key, keys in order. Other files in dir, Write's temporary files among them,
// are ignored. Write's own rename is reported too; Ensure of an unchanged file writes
// nothing, which ends the echo.
//
// onPeriod is called every period, so that an event that was missed (the kernel queue
// overflowed, the directory was replaced) is still caught: the agent re-Ensures every
// pool there. It is also called at once after a lost event is detected and after dir was
// re-watched. The first call is one period after the start; the agent Ensures its pools
// itself before.
//
// dir may be missing at the start, or removed and recreated later: Watch watches dir's
// parent to notice dir (re)appear, and in any case tries again every period. Files created
// while dir was not watched are caught by the onPeriod call that follows the new watch.
//
// Watch logs (with the logr.Logger of ctx, if any) when dir goes away and when events may
// have been lost. The callbacks run on Watch's goroutine, one at a time; events wait (in
// the kernel's queue) while they run. Watch returns an error when it cannot set up the
// watch (inotify limits, dir or its parent not a directory) or when the watch fails.
func Watch(ctx context.Context, dir string, period time.Duration, onChange func(pool string), onPeriod func()) error {
	if period <= 0 {
		return fmt.Errorf("watching manifests in %s: period must be positive, got %s", dir, period)
	}
	if onChange == nil || onPeriod == nil {
		return fmt.Errorf("watching manifests in %s: onChange and onPeriod are required", dir)
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	log := logr.FromContextOrDiscard(ctx)

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching manifests in %s: %w", dir, err)
	}
	defer w.Close()

	// add watches the directory path, and tells a missing path (retried later) from a
	// failure. inotify would watch a file too: refuse it.
	add := func(path string) (bool, error) {
		fi, err := os.Stat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, fmt.Errorf("watching manifests in %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return false, fmt.Errorf("watching manifests in %s: %s is not a directory", dir, path)
		}
		if err := w.Add(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return false, fmt.Errorf("watching manifests in %s: watching %s: %w", dir, path, err)
		}
		return true, nil
	}
	watchingParent := parent == dir // the root has no parent to watch
	if !watchingParent {
		if watchingParent, err = add(parent); err != nil {
			return err
		}
	}
	watchingDir, err := add(dir)
	if err != nil {
		return err
	}

	ticker := time.NewTicker(period)
	defer ticker.Stop()
	pending := map[string]struct{}{}
	var flush <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil

		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watching manifests in %s: the watcher closed its events", dir)
			}
			switch {
			case ev.Name == parent && parent != dir:
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					watchingParent = false
				}
			case ev.Name == dir:
				// From the parent's watch, or dir's own (deleted, moved away).
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					log.Info("The manifest directory went away; waiting for it to come back", "dir", dir)
					watchingDir = false
				}
				if ev.Has(fsnotify.Create) {
					if watchingDir, err = add(dir); err != nil {
						return err
					}
					if watchingDir {
						log.V(1).Info("Watching the manifest directory again", "dir", dir)
						onPeriod()
					}
				}
			case filepath.Dir(ev.Name) == dir:
				key, ok := PoolFromFileName(filepath.Base(ev.Name))
				if !ok {
					continue
				}
				pending[key] = struct{}{}
				if flush == nil {
					flush = time.After(coalesceWindow)
				}
			}

		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("watching manifests in %s: the watcher closed its errors", dir)
			}
			// The queue overflowed or a read failed: events may be lost.
			log.Error(err, "Manifest events may be lost; checking every pool", "dir", dir)
			onPeriod()

		case <-flush:
			flush = nil
			keys := slices.Sorted(maps.Keys(pending))
			clear(pending)
			for _, key := range keys {
				onChange(key)
			}

		case <-ticker.C:
			if !watchingParent {
				if watchingParent, err = add(parent); err != nil {
					return err
				}
			}
			if !watchingDir {
				if watchingDir, err = add(dir); err != nil {
					return err
				}
			}
			onPeriod()
		}
	}
}
