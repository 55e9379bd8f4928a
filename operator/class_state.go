package operator

import (
	"sync"
	"time"
)

// classState is what the class reconciler remembers of one class between passes. A
// restarted controller starts without it and behaves correctly: it shapes the size of the
// next pass's first batch of creates, says which conflicts were reported already, and times
// the fan-out.
type classState struct {
	// fanoutGeneration is the class generation first found out of sync, at fanoutSince;
	// fanoutSince is zero while the class is in sync.
	fanoutGeneration int64
	fanoutSince      time.Time
	// conflicted is the set of conflicting nodes last reported, so an event is emitted once
	// per new conflict rather than on every pass.
	conflicted map[string]bool
	// created are the nodes whose pool this reconciler created and its cache has not shown
	// yet, with when: the DaemonSet controller's expectations. A pass that starts before the
	// cache caught up would otherwise create them again (AlreadyExists, then a GET each).
	created map[string]time.Time
	// firstBatch is the batch the next creates start with: 0 (slowStartInitialBatch) at
	// first and after an error, else twice the last batch that fully succeeded, up to the
	// burst cap, so a fan-out larger than the cap does not restart its slow start at 1
	// every pass.
	firstBatch int
	// poolSeries are the pools whose capacity series the last pass set, with their zones,
	// so the next removes those of pools gone or moved to another zone.
	poolSeries map[string]string
}

// classStates holds the classState of every class the reconciler has seen. The zero value
// is ready to use.
type classStates struct {
	mu     sync.Mutex // guards byName and the states in it
	byName map[string]*classState
}

// with calls f with the state of class, made if the class has none yet, under the lock.
func (s *classStates) with(class string, f func(*classState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName == nil {
		s.byName = map[string]*classState{}
	}
	st := s.byName[class]
	if st == nil {
		st = &classState{}
		s.byName[class] = st
	}
	f(st)
}

// forget drops the state of a deleted class.
func (s *classStates) forget(class string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byName, class)
}

// firstBatch is the size of the first batch of the class's next creates.
func (s *classStates) firstBatch(class string) int {
	b := slowStartInitialBatch
	s.with(class, func(st *classState) {
		if st.firstBatch > 0 {
			b = st.firstBatch
		}
	})
	return b
}

// noteBatch records how the class's creates went: lastOK is the largest batch that fully
// succeeded (0 if none), err their error.
func (s *classStates) noteBatch(class string, lastOK int, err error, burst int) {
	s.with(class, func(st *classState) {
		if err != nil || lastOK == 0 {
			st.firstBatch = 0
			return
		}
		st.firstBatch = min(2*lastOK, burst)
	})
}

// newConflicts records the class's conflicting nodes of this pass and returns those not
// reported by the pass before.
func (s *classStates) newConflicts(class string, conflicts []nodeConflict) []nodeConflict {
	var fresh []nodeConflict
	s.with(class, func(st *classState) {
		now := make(map[string]bool, len(conflicts))
		for _, c := range conflicts {
			now[c.Node] = true
			if !st.conflicted[c.Node] {
				fresh = append(fresh, c)
			}
		}
		st.conflicted = now
	})
	return fresh
}

// noteFanout times the fan-out, from the first pass that finds a class generation's pools
// out of sync to the first that finds them in sync: done reports that this pass ended one
// that took d.
func (s *classStates) noteFanout(class string, generation int64, outOfSync bool, now time.Time) (d time.Duration, done bool) {
	s.with(class, func(st *classState) {
		started := !st.fanoutSince.IsZero()
		switch {
		case outOfSync && (!started || st.fanoutGeneration != generation):
			st.fanoutGeneration, st.fanoutSince = generation, now
		case !outOfSync && started:
			d, done = now.Sub(st.fanoutSince), true
			st.fanoutSince = time.Time{}
		}
	})
	return d, done
}

// swapPoolSeries records the pools (and zones) whose capacity series this pass sets and
// returns those the pass before set.
func (s *classStates) swapPoolSeries(class string, pools map[string]poolFigures) map[string]string {
	now := make(map[string]string, len(pools))
	for name, f := range pools {
		now[name] = f.zone
	}
	var before map[string]string
	s.with(class, func(st *classState) { before, st.poolSeries = st.poolSeries, now })
	return before
}

// expectCreatedFor is how long a created pool is expected in the cache before a pass may
// create it again (a create the cache never shows, because the pool was deleted at once).
const expectCreatedFor = 30 * time.Second

// notExpected drops from nodes those whose pool the reconciler created and the cache does
// not show yet (less than expectCreatedFor ago), and forgets the nodes cached shows.
func (s *classStates) notExpected(class string, nodes []string, cached func(node string) bool, now time.Time) []string {
	var out []string
	s.with(class, func(st *classState) {
		for node, at := range st.created {
			if cached(node) || now.Sub(at) >= expectCreatedFor {
				delete(st.created, node)
			}
		}
		for _, n := range nodes {
			if _, ok := st.created[n]; !ok {
				out = append(out, n)
			}
		}
	})
	return out
}

// expectCreated records that the pools of nodes were created now.
func (s *classStates) expectCreated(class string, nodes []string, now time.Time) {
	s.with(class, func(st *classState) {
		if st.created == nil {
			st.created = map[string]time.Time{}
		}
		for _, n := range nodes {
			st.created[n] = now
		}
	})
}
