package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

// DefaultStateFile is --state-file's default.
const DefaultStateFile = "/var/lib/sandbox-pool/agent-state.json"

// nodeState is what the agent keeps in Options.StateFile across its restarts: what it must
// not take for zero when it starts and node-ctl does not answer, or forget once a file and
// its pod are gone. Everything else it re-derives from what it observes.
type nodeState struct {
	// NodeCtl is what node-ctl last reported it applies; nil before it first reported a
	// config applied.
	NodeCtl *reportedApply `json:"nodeCtl,omitempty"`
	// LastPiece is the highest piece number the agent has written on this node, of any
	// pool: piece pods of all pools share one name space (sandbox-pool-{n}), and a number is
	// not used again, so kubelet never holds a new piece back behind an old pod of its name.
	LastPiece int `json:"lastPiece,omitempty"`
}

// reportedApply is a config node-ctl reported applied: its pool and its resources.
type reportedApply struct {
	Pool      api.PoolRef       `json:"pool"`
	Resources map[string]string `json:"resources"`
}

func (r *reportedApply) equal(o *reportedApply) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.Pool == o.Pool && maps.Equal(r.Resources, o.Resources)
}

// reportedOf is what st says node-ctl applies, nil when it applies nothing.
func reportedOf(st *api.State) *reportedApply {
	if st == nil || !st.Applied() {
		return nil
	}
	return &reportedApply{Pool: st.Pool, Resources: maps.Clone(st.AppliedResources)}
}

// readState reads the state file; a missing file is an empty state.
func readState(path string) (nodeState, error) {
	var st nodeState
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading the state file %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nodeState{}, fmt.Errorf("parsing the state file %s: %w", path, err)
	}
	return st, nil
}

// writeState replaces the state file atomically: a temporary file beside it, synced, renamed
// over it, and the directory synced, so a crash leaves the old state or the new one.
func writeState(path string, st nodeState) (err error) {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the state file %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing the directory of the state file %s: %w", path, err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("syncing the directory of the state file %s: %w", path, err)
	}
	return nil
}

// loadState reads the state file into the agent at start. A state file that cannot be read
// is reported and the agent starts from nothing kept: the node-ctl config file it wrote
// still bounds what node-ctl may enforce.
func (a *Agent) loadState() error {
	st, err := readState(a.opts.StateFile)
	a.mu.Lock()
	a.kept = st
	a.mu.Unlock()
	return err
}

// keep changes the kept state with change and writes it when it changed, or when the last
// write failed. The agent goes by the changed state whether or not it could be written.
// Writes are serialised.
func (a *Agent) keep(change func(*nodeState)) error {
	a.keepMu.Lock()
	defer a.keepMu.Unlock()
	a.mu.Lock()
	next := a.kept
	if next.NodeCtl != nil {
		c := *next.NodeCtl
		c.Resources = maps.Clone(c.Resources)
		next.NodeCtl = &c
	}
	change(&next)
	same := next.LastPiece == a.kept.LastPiece && next.NodeCtl.equal(a.kept.NodeCtl)
	a.kept = next
	unwritten := a.keptUnwritten
	a.mu.Unlock()
	if same && !unwritten {
		return nil
	}
	err := writeState(a.opts.StateFile, next)
	a.mu.Lock()
	a.keptUnwritten = err != nil
	a.mu.Unlock()
	return err
}
