package operator

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestClassStates(t *testing.T) {
	var s classStates
	const burst = 10
	// The slow start begins at 1, continues at twice the last batch that fully succeeded,
	// up to the burst cap, and begins again at 1 after an error.
	var firsts []int
	for _, step := range []struct {
		lastOK int
		err    error
	}{{1, nil}, {4, nil}, {8, nil}, {2, errors.New("quota")}, {0, nil}} {
		firsts = append(firsts, s.firstBatch("a"))
		s.noteBatch("a", step.lastOK, step.err, burst)
	}
	firsts = append(firsts, s.firstBatch("a"))
	if want := []int{1, 2, 8, 10, 1, 1}; !slices.Equal(firsts, want) {
		t.Errorf("first batches %v, want %v", firsts, want)
	}
	if b := s.firstBatch("b"); b != slowStartInitialBatch {
		t.Errorf("another class starts at %d, want %d", b, slowStartInitialBatch)
	}

	// A conflict is new once; one that goes away and comes back is new again.
	n1, n2 := nodeConflict{Node: "n1"}, nodeConflict{Node: "n2"}
	for i, step := range []struct{ now, fresh []nodeConflict }{
		{[]nodeConflict{n1}, []nodeConflict{n1}},
		{[]nodeConflict{n1, n2}, []nodeConflict{n2}},
		{[]nodeConflict{n2}, nil},
		{[]nodeConflict{n1, n2}, []nodeConflict{n1}},
	} {
		if got := s.newConflicts("a", step.now); !slices.Equal(got, step.fresh) {
			t.Errorf("pass %d: new conflicts %v, want %v", i, got, step.fresh)
		}
	}

	// The fan-out is timed from the first pass out of sync (a new generation restarts it)
	// to the first pass in sync.
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, step := range []struct {
		gen       int64
		outOfSync bool
		at        time.Duration
		d         time.Duration
		done      bool
	}{
		{1, false, 0, 0, false},
		{2, true, time.Second, 0, false},
		{2, true, 2 * time.Second, 0, false},
		{3, true, 5 * time.Second, 0, false},
		{3, false, 8 * time.Second, 3 * time.Second, true},
		{3, false, 9 * time.Second, 0, false},
	} {
		if d, done := s.noteFanout("a", step.gen, step.outOfSync, t0.Add(step.at)); d != step.d || done != step.done {
			t.Errorf("pass %d: fan-out %v, %v; want %v, %v", i, d, done, step.d, step.done)
		}
	}

	s.forget("a")
	if b := s.firstBatch("a"); b != slowStartInitialBatch {
		t.Errorf("a forgotten class starts at %d, want %d", b, slowStartInitialBatch)
	}
	if got := s.newConflicts("a", []nodeConflict{n2}); !slices.Equal(got, []nodeConflict{n2}) {
		t.Errorf("a forgotten class's conflict %v is not new", got)
	}
}

// TestCreateExpectations: a pool created and not yet in the cache is not created again by
// the passes that follow, until the cache shows it or expectCreatedFor passes.
func TestCreateExpectations(t *testing.T) {
	var s classStates
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	none := func(string) bool { return false }
	s.expectCreated("c", []string{"n1", "n2"}, now)
	if got := s.notExpected("c", []string{"n1", "n2", "n3"}, none, now.Add(time.Second)); !slices.Equal(got, []string{"n3"}) {
		t.Errorf("before the cache shows them: create %v, want [n3]", got)
	}
	if got := s.notExpected("other", []string{"n1"}, none, now); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("another class: create %v, want [n1]", got)
	}
	// The cache shows n1 (and a pass finds it no longer to create); n2 never shows.
	if got := s.notExpected("c", []string{"n2"}, func(n string) bool { return n == "n1" }, now.Add(2*time.Second)); len(got) != 0 {
		t.Errorf("n2 still expected: create %v, want none", got)
	}
	if got := s.notExpected("c", []string{"n1", "n2"}, none, now.Add(expectCreatedFor)); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("n1 seen, n2 expected too long: create %v, want both", got)
	}
}
