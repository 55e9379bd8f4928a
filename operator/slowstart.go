package operator

import (
	"sync"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// slowStartInitialBatch is the first batch of creates; each later batch doubles it.
const slowStartInitialBatch = 1

// slowStartBatch calls fn for 0..count-1 in batches of initial, 2×initial, 4×initial, … (the
// DaemonSet and ReplicaSet controllers' slow start from 1). The calls of one batch run
// concurrently; a batch with any error ends the run, so a systematic failure (quota, webhook
// down, RBAC) costs one call instead of count. It returns how many calls succeeded, the size
// of the largest batch that fully succeeded (0 if none), and the errors.
func slowStartBatch(count, initial int, fn func(i int) error) (int, int, error) {
	done, lastOK := 0, 0
	for batch := min(count, initial); batch > 0; batch = min(2*batch, count-done) {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex // guards errs
			errs []error
		)
		for i := done; i < done+batch; i++ {
			wg.Go(func() {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		done += batch - len(errs)
		if len(errs) > 0 {
			return done, lastOK, utilerrors.NewAggregate(errs)
		}
		lastOK = max(lastOK, batch)
	}
	return done, lastOK, nil
}
