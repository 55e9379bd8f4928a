package operator

import (
	"sync"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// slowStartInitialBatch is the first batch of creates; each later batch doubles it.
const slowStartInitialBatch = 1

// slowStartBatch calls fn for 0..count-1 in batches of 1, 2, 4, … (the DaemonSet and
// ReplicaSet controllers' slow start). The calls of one batch run concurrently; a batch
// with any error ends the run, so a systematic failure (quota, webhook down, RBAC) costs
// one call instead of count. It returns how many calls succeeded and their errors.
func slowStartBatch(count, initial int, fn func(i int) error) (int, error) {
	done := 0
	for batch := min(count, initial); batch > 0; batch = min(2*batch, count-done) {
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex // guards errs
			errs []error
		)
		for i := done; i < done+batch; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		done += batch - len(errs)
		if len(errs) > 0 {
			return done, utilerrors.NewAggregate(errs)
		}
	}
	return done, nil
}
