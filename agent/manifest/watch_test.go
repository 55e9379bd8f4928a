package manifest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// deadline bounds every wait for an event; events normally arrive in milliseconds.
const deadline = 10 * time.Second

// watcher is a running Watch whose callbacks feed channels.
type watcher struct {
	changes chan string
	periods chan struct{}
	done    chan error
}

// startWatch runs Watch on dir until the test ends.
func startWatch(t *testing.T, dir string, period time.Duration) *watcher {
	t.Helper()
	w := &watcher{changes: make(chan string, 100), periods: make(chan struct{}, 100), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		w.done <- Watch(ctx, dir, period,
			func(pool string) { w.changes <- pool },
			func() {
				select {
				case w.periods <- struct{}{}:
				default:
				}
			})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("Watch returned %v", err)
			}
		case <-time.After(deadline):
			t.Error("Watch did not return after its context ended")
		}
	})
	return w
}

// ready waits until the watch on dir reports events: it touches a marker manifest until
// the marker is reported, then forgets everything reported so far.
func (w *watcher) ready(t *testing.T, dir string) {
	t.Helper()
	const marker = "ready"
	path := filepath.Join(dir, FileName(marker, 1))
	stop := time.After(deadline)
	for {
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-w.changes:
			if got == marker {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				w.expect(t, marker) // the removal
				w.drain()
				return
			}
		case <-time.After(200 * time.Millisecond):
		case <-stop:
			t.Fatal("the watch never reported the marker file")
		}
	}
}

// expect waits for onChange(pool), skipping other pools.
func (w *watcher) expect(t *testing.T, pool string) {
	t.Helper()
	stop := time.After(deadline)
	for {
		select {
		case got := <-w.changes:
			if got == pool {
				return
			}
		case <-stop:
			t.Fatalf("no onChange(%q) within %s", pool, deadline)
		}
	}
}

func (w *watcher) drain() {
	for {
		select {
		case <-w.changes:
		default:
			return
		}
	}
}

func (w *watcher) expectPeriod(t *testing.T) {
	t.Helper()
	select {
	case <-w.periods:
	case <-time.After(deadline):
		t.Fatalf("no onPeriod within %s", deadline)
	}
}

func TestWatchReportsChanges(t *testing.T) {
	data := mustRender(t, testSpec())
	cases := []struct {
		name   string
		exists bool // the manifest exists before
		act    func(t *testing.T, dir, path string)
	}{
		{"created", false, func(t *testing.T, dir, path string) {
			if err := Write(dir, pool, 1, data); err != nil {
				t.Fatal(err)
			}
		}},
		{"edited in place", true, func(t *testing.T, dir, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString("# edit\n"); err != nil {
				t.Fatal(err)
			}
		}},
		{"deleted", true, func(t *testing.T, dir, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"renamed away", true, func(t *testing.T, dir, path string) {
			if err := os.Rename(path, filepath.Join(dir, "moved")); err != nil {
				t.Fatal(err)
			}
		}},
		{"mode changed", true, func(t *testing.T, dir, path string) {
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName(pool, 1))
			if tc.exists {
				if err := Write(dir, pool, 1, data); err != nil {
					t.Fatal(err)
				}
			}
			w := startWatch(t, dir, time.Hour)
			w.ready(t, dir)
			tc.act(t, dir, path)
			w.expect(t, pool)
		})
	}
}

// TestWatchIgnoresOtherFiles: files that are not manifests, Write's temporary files among
// them, report nothing. A manifest written last is the first thing reported.
func TestWatchIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	w := startWatch(t, dir, time.Hour)
	w.ready(t, dir)
	for _, name := range []string{"kube-apiserver.yaml", "sandbox-pool-x.yml", ".sandbox-pool-x.yaml.tmp-1", "sandbox-pool-x.yaml~", "sandbox-pool-.yaml"} {
		writeRaw(t, dir, name, []byte("x"))
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// "zzz" sorts after any key a wrongly reported file could give, and the reports of one
	// coalesced batch come in key order: whatever comes before it is a wrong report.
	const last = "zzz"
	if err := Write(dir, last, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.changes:
		if got != last {
			t.Errorf("onChange(%q) for a file that is not a manifest", got)
		}
	case <-time.After(deadline):
		t.Fatalf("no onChange(%q) within %s", last, deadline)
	}
}

// TestWatchCoalesces: a burst of events on one manifest is reported at least once and
// far fewer times than it has events.
func TestWatchCoalesces(t *testing.T) {
	dir := t.TempDir()
	w := startWatch(t, dir, time.Hour)
	w.ready(t, dir)
	const writes = 50
	for range writes {
		if err := Write(dir, pool, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	w.expect(t, pool)
	if err := Write(dir, "zzz", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	calls := 1
	for stop := time.After(deadline); ; {
		select {
		case got := <-w.changes:
			if got != "zzz" {
				calls++
				continue
			}
		case <-stop:
			t.Fatalf("no onChange(zzz) within %s", deadline)
		}
		break
	}
	if calls >= writes {
		t.Errorf("%d onChange calls for %d writes", calls, writes)
	}
}

func TestWatchPeriod(t *testing.T) {
	w := startWatch(t, t.TempDir(), 10*time.Millisecond)
	for range 3 {
		w.expectPeriod(t)
	}
}

// TestWatchDirectoryRecreated: after the manifest directory is removed and created again,
// the watch resumes, calls onPeriod to catch what it could not see, and reports changes.
func TestWatchDirectoryRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, pool, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, dir, time.Hour) // no periodic onPeriod: any call is the resync
	w.ready(t, dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	w.expect(t, pool) // the removal of the manifest
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.expectPeriod(t)
	if err := Write(dir, "placeholder-new", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	w.expect(t, "placeholder-new")
}

// TestWatchDirectoryMissingAtStart: Watch waits for the directory to appear.
func TestWatchDirectoryMissingAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	w := startWatch(t, dir, 50*time.Millisecond)
	w.expectPeriod(t) // running
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.ready(t, dir)
}

func TestWatchArguments(t *testing.T) {
	ctx := context.Background()
	noop, noopPool := func() {}, func(string) {}
	for name, err := range map[string]error{
		"zero period":   Watch(ctx, t.TempDir(), 0, noopPool, noop),
		"no onChange":   Watch(ctx, t.TempDir(), time.Second, nil, noop),
		"no onPeriod":   Watch(ctx, t.TempDir(), time.Second, noopPool, nil),
		"dir is a file": Watch(ctx, writeRaw(t, t.TempDir(), "file", nil), time.Second, noopPool, noop),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
