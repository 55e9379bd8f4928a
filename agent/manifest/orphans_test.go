package manifest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

var poolsResource = schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.ResourceSandboxPools}

// fakeLookup answers from a table and records the names it was asked for.
type fakeLookup struct {
	uid   map[string]string
	err   map[string]error
	asked []string
}

func (f *fakeLookup) lookup(ctx context.Context, name string) (string, error) {
	f.asked = append(f.asked, name)
	if err, ok := f.err[name]; ok {
		return "", err
	}
	if uid, ok := f.uid[name]; ok {
		return uid, nil
	}
	return "", apierrors.NewNotFound(poolsResource, name)
}

func TestCleanupOrphans(t *testing.T) {
	const uid = "uid-1"
	s := testSpec()
	s.PoolUID = uid
	manifest := mustRender(t, s)
	name := s.PoolName
	connRefused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

	cases := []struct {
		name    string
		data    []byte // the file; nil for our manifest
		exists  bool   // whether the pool exists
		uid     string // its UID
		err     error  // the lookup's error, if any
		reason  Reason
		removed bool
		asked   bool // whether the lookup is called
	}{
		{name: "pool not found", reason: ReasonPoolNotFound, removed: true, asked: true},
		{name: "pool recreated", exists: true, uid: "uid-2", reason: ReasonPoolUIDMismatch, removed: true, asked: true},
		{name: "pool exists", exists: true, uid: uid, reason: ReasonPoolExists, asked: true},
		{name: "timeout", err: apierrors.NewTimeoutError("request timed out", 1), reason: ReasonLookupFailed, asked: true},
		{name: "deadline exceeded", err: context.DeadlineExceeded, reason: ReasonLookupFailed, asked: true},
		{name: "connection refused", err: connRefused, reason: ReasonLookupFailed, asked: true},
		{name: "forbidden", err: apierrors.NewForbidden(poolsResource, name, errors.New("rbac")), reason: ReasonLookupFailed, asked: true},
		{name: "service unavailable", err: apierrors.NewServiceUnavailable("etcd"), reason: ReasonLookupFailed, asked: true},
		// 404s that are not about the pool: the resource is missing, not the object.
		{name: "crd not installed", err: apierrors.NewNotFound(schema.GroupResource{}, ""), reason: ReasonLookupFailed, asked: true},
		{name: "404 without a status", err: apierrors.NewGenericServerResponse(404, "GET", poolsResource, name, "404 page not found", 0, true), reason: ReasonLookupFailed, asked: true},
		{name: "another pool's NotFound", err: apierrors.NewNotFound(poolsResource, "other"), reason: ReasonLookupFailed, asked: true},
		{name: "wrapped NotFound", err: errorsJoin(apierrors.NewNotFound(poolsResource, name)), reason: ReasonPoolNotFound, removed: true, asked: true},
		{name: "found without a UID", exists: true, uid: "", reason: ReasonLookupFailed, asked: true},
		{name: "unparseable", data: []byte("{{{"), reason: ReasonUnidentified},
		{name: "not ours", data: []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"), reason: ReasonUnidentified},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := tc.data
			if data == nil {
				data = manifest
			}
			path := writeRaw(t, dir, FileName(name, 1), data)
			writeRaw(t, dir, "kube-apiserver.yaml", []byte("not ours, not a manifest of a pool"))
			fake := &fakeLookup{uid: map[string]string{}, err: map[string]error{}}
			if tc.err != nil {
				fake.err[name] = tc.err
			} else if tc.exists {
				fake.uid[name] = tc.uid
			}

			r, err := CleanupOrphans(context.Background(), dir, fake.lookup)
			if err != nil {
				t.Fatal(err)
			}
			list, other := r.Kept, r.Removed
			if tc.removed {
				list, other = r.Removed, r.Kept
			}
			if len(list) != 1 || len(other) != 0 {
				t.Fatalf("report %+v, want the file once, removed=%v", r, tc.removed)
			}
			d := list[0]
			if d.Path != path || d.Reason != tc.reason {
				t.Errorf("decision %+v, want %s for %s", d, tc.reason, path)
			}
			if tc.reason == ReasonLookupFailed || tc.reason == ReasonUnidentified {
				if d.Err == nil {
					t.Error("a kept file without the error that kept it")
				}
			}
			if tc.err != nil && !errors.Is(d.Err, tc.err) {
				t.Errorf("decision error %v does not wrap the lookup's %v", d.Err, tc.err)
			}
			if tc.reason == ReasonPoolUIDMismatch && (d.PoolUID != uid || d.CurrentUID != tc.uid) {
				t.Errorf("mismatch reported as file %q, pool %q", d.PoolUID, d.CurrentUID)
			}
			_, statErr := os.Stat(path)
			if exists := statErr == nil; exists == tc.removed {
				t.Errorf("file exists = %v, want %v", exists, !tc.removed)
			}
			if asked := len(fake.asked) > 0; asked != tc.asked {
				t.Errorf("lookup called for %v, want called: %v", fake.asked, tc.asked)
			}
			if !slices.Contains(dirNames(t, dir), "kube-apiserver.yaml") {
				t.Error("a file that is not a pool manifest was removed")
			}
		})
	}
}

// errorsJoin wraps err the way a lookup that adds context would.
func errorsJoin(err error) error { return errors.Join(errors.New("getting pool"), err) }

// TestCleanupOrphansMany: several files at once, each decided on its own, in name order;
// leftover temporary files go.
func TestCleanupOrphansMany(t *testing.T) {
	dir := t.TempDir()
	specs := map[string]string{"placeholder-a": "uid-a", "placeholder-b": "uid-b", "placeholder-c": "uid-c"}
	for name, uid := range specs {
		s := testSpec()
		s.PoolName, s.PoolUID = name, uid
		if err := Write(dir, name, 1, mustRender(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	temp := writeRaw(t, dir, ".sandbox-pool-placeholder-a.yaml.tmp-12345", []byte("half"))
	writeRaw(t, dir, ".hidden", nil)
	fake := &fakeLookup{
		uid: map[string]string{"placeholder-a": "uid-a", "placeholder-c": "uid-new"},
		err: map[string]error{},
	}
	r, err := CleanupOrphans(context.Background(), dir, fake.lookup)
	if err != nil {
		t.Fatal(err)
	}
	var removed, kept []string
	for _, d := range r.Removed {
		removed = append(removed, filepath.Base(d.Path)+":"+string(d.Reason))
	}
	for _, d := range r.Kept {
		kept = append(kept, filepath.Base(d.Path)+":"+string(d.Reason))
	}
	wantRemoved := []string{
		filepath.Base(temp) + ":" + string(ReasonTemporaryFile),
		"sandbox-pool-placeholder-b_1.yaml:" + string(ReasonPoolNotFound),
		"sandbox-pool-placeholder-c_1.yaml:" + string(ReasonPoolUIDMismatch),
	}
	if !slices.Equal(removed, wantRemoved) || !slices.Equal(kept, []string{"sandbox-pool-placeholder-a_1.yaml:" + string(ReasonPoolExists)}) {
		t.Errorf("removed %v, kept %v", removed, kept)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{".hidden", "sandbox-pool-placeholder-a_1.yaml"}) {
		t.Errorf("directory holds %v", names)
	}
}

func TestCleanupOrphansEdges(t *testing.T) {
	t.Run("missing dir", func(t *testing.T) {
		r, err := CleanupOrphans(context.Background(), filepath.Join(t.TempDir(), "missing"), (&fakeLookup{}).lookup)
		if err != nil || len(r.Removed)+len(r.Kept) != 0 {
			t.Errorf("CleanupOrphans = %+v, %v", r, err)
		}
	})
	t.Run("dir is a file", func(t *testing.T) {
		path := writeRaw(t, t.TempDir(), "file", nil)
		if _, err := CleanupOrphans(context.Background(), path, (&fakeLookup{}).lookup); err == nil {
			t.Error("no error")
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		dir := t.TempDir()
		s := testSpec()
		if err := Write(dir, s.PoolName, 1, mustRender(t, s)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		fake := &fakeLookup{}
		r, err := CleanupOrphans(ctx, dir, fake.lookup)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kept) != 1 || r.Kept[0].Reason != ReasonLookupFailed || !errors.Is(r.Kept[0].Err, context.Canceled) || len(fake.asked) != 0 {
			t.Errorf("report %+v, lookups %v; want the file kept, no lookup", r, fake.asked)
		}
	})
	t.Run("a directory with a manifest's name", func(t *testing.T) {
		dir := t.TempDir()
		sub := filepath.Join(dir, FileName("placeholder-x", 1))
		if err := os.MkdirAll(filepath.Join(sub, "child"), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := CleanupOrphans(context.Background(), dir, (&fakeLookup{}).lookup)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kept) != 1 || r.Kept[0].Reason != ReasonUnidentified || len(r.Removed) != 0 {
			t.Errorf("report %+v, want it kept as unidentified", r)
		}
	})
	t.Run("removal fails", func(t *testing.T) {
		// While the pool is looked up, the file is replaced by a non-empty directory, so
		// the removal of the orphan fails whoever runs the test.
		dir := t.TempDir()
		s := testSpec()
		if err := Write(dir, s.PoolName, 1, mustRender(t, s)); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, FileName(s.PoolName, 1))
		lookup := func(ctx context.Context, name string) (string, error) {
			if err := os.Remove(path); err != nil {
				return "", err
			}
			if err := os.MkdirAll(filepath.Join(path, "child"), 0o755); err != nil {
				return "", err
			}
			return "", apierrors.NewNotFound(poolsResource, name)
		}
		r, err := CleanupOrphans(context.Background(), dir, lookup)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kept) != 1 || r.Kept[0].Reason != ReasonRemoveFailed || r.Kept[0].Err == nil || len(r.Removed) != 0 {
			t.Errorf("report %+v, want the file kept with %s", r, ReasonRemoveFailed)
		}
	})
}
