package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolLookup returns the UID of the SandboxPool called name. When the pool does not exist,
// the error satisfies apierrors.IsNotFound; any other error means "could not tell". A Get
// of a typed or dynamic client is such a lookup, errors unchanged.
//
// CleanupOrphans believes a NotFound only when its status details name the pool: the API
// server answers 404 NotFound also when the SandboxPool resource itself is missing (CRD
// not installed or not yet established), with details that name no object, and client-go
// turns a 404 without a Status body into a NotFound with an UnexpectedServerResponse
// cause. Neither proves the pool gone, so both keep the file.
type PoolLookup func(ctx context.Context, name string) (uid string, err error)

// Reason says why CleanupOrphans removed or kept a file.
type Reason string

// Reasons of a removal.
const (
	// ReasonPoolNotFound: the pool in the file's annotation does not exist.
	ReasonPoolNotFound Reason = "PoolNotFound"
	// ReasonPoolUIDMismatch: the pool exists under another UID, so it was deleted and
	// recreated; its manifest will be rendered afresh.
	ReasonPoolUIDMismatch Reason = "PoolUIDMismatch"
	// ReasonTemporaryFile: a temporary file of Write left by a crash between its creation
	// and its rename. kubelet never read it.
	ReasonTemporaryFile Reason = "TemporaryFile"
)

// Reasons to keep a file.
const (
	// ReasonPoolExists: the pool exists with the UID in the file.
	ReasonPoolExists Reason = "PoolExists"
	// ReasonLookupFailed: the pool could not be looked up (API server unreachable,
	// Forbidden, timeout, ...). The file is tested again at the next start.
	ReasonLookupFailed Reason = "LookupFailed"
	// ReasonUnidentified: the file matches FilePattern but cannot be read or parsed as a
	// manifest of ours, so there is no pool to test. Never deleted: someone must look.
	ReasonUnidentified Reason = "Unidentified"
	// ReasonRemoveFailed: the file was an orphan, but deleting it failed.
	ReasonRemoveFailed Reason = "RemoveFailed"
)

// Decision is what CleanupOrphans did with one file, and why.
type Decision struct {
	// Path of the file.
	Path string
	// PoolName and PoolUID are the file's annotations; empty when it is unidentified.
	PoolName string
	PoolUID  string
	// CurrentUID is the UID the lookup returned, when it returned one.
	CurrentUID string
	Reason     Reason
	// Err is the error behind the reason: the lookup's, Read's or the removal's; nil
	// for ReasonPoolExists, ReasonPoolUIDMismatch and ReasonTemporaryFile.
	Err error
}

// Report lists the files CleanupOrphans removed and the files it kept, in name order.
type Report struct {
	Removed []Decision
	Kept    []Decision
}

// CleanupOrphans is the agent's startup orphan test (docs/design.md §3.5). For each manifest
// (FilePattern) in dir it looks up the pool named in the file's sandbox-pool.io/pool-name
// annotation:
//   - the pool does not exist (a NotFound naming it, see PoolLookup), or exists with another UID than the
//     file's sandbox-pool.io/pool-uid: the file is deleted, and kubelet stops the pod;
//   - the pool exists with the file's UID: kept;
//   - any other error (API server unreachable, Forbidden, timeout, a cancelled ctx) or an
//     empty UID: kept, to be tested again at the next start;
//   - the file cannot be read or parsed: kept and reported, since a file we cannot
//     identify is never deleted.
//
// Temporary files of an interrupted Write are deleted too, so call it before this process
// writes any manifest. Lookups run one after the other, with ctx. The error is only for a dir
// that cannot be listed; a missing dir has nothing to clean. Every file is in the report.
func CleanupOrphans(ctx context.Context, dir string, lookup PoolLookup) (Report, error) {
	var r Report
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return r, nil
		}
		return r, fmt.Errorf("cleaning up orphan manifests in %s: %w", dir, err)
	}
	removed := false
	remove := func(d Decision) {
		if err := os.Remove(d.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.Err = fmt.Errorf("removing %s (%s): %w", d.Path, d.Reason, err)
			d.Reason = ReasonRemoveFailed
			r.Kept = append(r.Kept, d)
			return
		}
		removed = true
		r.Removed = append(r.Removed, d)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if isTempName(e.Name()) {
			remove(Decision{Path: path, Reason: ReasonTemporaryFile})
			continue
		}
		if _, ok := PoolFromFileName(e.Name()); !ok {
			continue
		}
		f, err := Read(path)
		if err != nil {
			r.Kept = append(r.Kept, Decision{Path: path, Reason: ReasonUnidentified, Err: err})
			continue
		}
		d := Decision{Path: path, PoolName: f.PoolName, PoolUID: f.PoolUID}
		d.CurrentUID, d.Err = lookupPool(ctx, lookup, f.PoolName)
		switch {
		case poolNotFound(d.Err, f.PoolName):
			d.Reason = ReasonPoolNotFound
			remove(d)
		case d.Err != nil:
			d.Reason = ReasonLookupFailed
			r.Kept = append(r.Kept, d)
		case d.CurrentUID != f.PoolUID:
			d.Reason = ReasonPoolUIDMismatch
			remove(d)
		default:
			d.Reason = ReasonPoolExists
			r.Kept = append(r.Kept, d)
		}
	}
	if removed {
		if err := syncDir(dir); err != nil {
			return r, fmt.Errorf("cleaning up orphan manifests in %s: %w", dir, err)
		}
	}
	return r, nil
}

// poolNotFound reports whether err says that the pool name does not exist (see
// PoolLookup): a NotFound whose details name the pool, without an unexpected response.
func poolNotFound(err error, name string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	if d == nil || d.Name != name {
		return false
	}
	for _, c := range d.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return true
}

// lookupPool calls lookup, and turns a success without a UID into an error: a broken
// lookup must not make every manifest look like an orphan.
func lookupPool(ctx context.Context, lookup PoolLookup, name string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("looking up pool %s: %w", name, err)
	}
	uid, err := lookup(ctx, name)
	if err != nil {
		return "", fmt.Errorf("looking up pool %s: %w", name, err)
	}
	if uid == "" {
		return "", fmt.Errorf("looking up pool %s: the lookup returned no UID", name)
	}
	return uid, nil
}
