package schema

import (
	"container/list"
	"sync"
)

// DefaultCacheBytes bounds the results a Schema keeps: enough for the pieces of a few
// thousand pools (about 5 KiB each), the hollow fleet of the scale benchmarks included.
const DefaultCacheBytes = 16 << 20

// result is what CUE made of one piece of an object: its JSON with the defaults filled in,
// or the violations it has. Both are values: a result is shared by every caller that
// evaluates the same piece.
type result struct {
	out        []byte
	violations []violation
}

// cache keeps the results of evaluations by the content they were computed from, the least
// recently used dropped first once its entries take more than max bytes. A key holds the
// whole content (not a hash of it): a hit is the same input, never a collision.
type cache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *entry, most recently used first
	byKey map[string]*list.Element

	hits, misses uint64
}

type entry struct {
	key string
	res result
}

func newCache(maxBytes int) *cache {
	return &cache{max: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *cache) get(key string) (result, bool) {
	if c == nil || c.max <= 0 {
		return result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		c.misses++
		return result{}, false
	}
	c.hits++
	c.order.MoveToFront(el)
	return el.Value.(*entry).res, true
}

func (c *cache) put(key string, res result) {
	if c == nil || c.max <= 0 {
		return
	}
	n := sizeOf(key, res)
	if n > c.max/8 {
		return // one piece must not flush the others
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&entry{key: key, res: res})
	c.size += n
	for c.size > c.max {
		last := c.order.Back()
		e := last.Value.(*entry)
		c.order.Remove(last)
		delete(c.byKey, e.key)
		c.size -= sizeOf(e.key, e.res)
	}
}

// sizeOf approximates the memory an entry holds.
func sizeOf(key string, res result) int {
	n := len(key) + len(res.out) + 64
	for _, v := range res.violations {
		n += len(v.msg) + 16
		for _, p := range v.path {
			n += len(p) + 16
		}
	}
	return n
}

// CacheStats are the counts of a Schema's result cache.
type CacheStats struct {
	Hits, Misses uint64
	Entries      int
	Bytes        int
}

// CacheStats reports how often evaluations were served from the cache.
func (s *Schema) CacheStats() CacheStats {
	c := s.cache
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits, Misses: c.misses, Entries: len(c.byKey), Bytes: c.size}
}
