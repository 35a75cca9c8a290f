package policy

import (
	"runtime"
	"sync"
	"time"
)

// CacheAwareConfig holds cache_aware's parameters, named after
// sglang_router's flags.
type CacheAwareConfig struct {
	// CacheThreshold (--cache-threshold) is the share of the key, 0 to 1,
	// that the best match must exceed to win.
	CacheThreshold float64
	// BalanceAbsThreshold (--balance-abs-threshold): the pool is imbalanced
	// only if its largest and smallest loads differ by more than this...
	BalanceAbsThreshold int
	// BalanceRelThreshold (--balance-rel-threshold): ...and the largest load
	// is more than this many times the smallest.
	BalanceRelThreshold float64
	// MaxTreeSize (--max-tree-size) is the bytes of keys each worker may
	// keep in each tree (text and tokens) after Evict.
	MaxTreeSize int
	// EvictionInterval (--eviction-interval-secs) is how often the caller
	// should call Evict; CacheAware runs no timer of its own.
	EvictionInterval time.Duration
}

// DefaultCacheAware returns the defaults of sglang_router's Python launcher
// (sglang_router/router_args.py, RouterArgs), which launch lines go
// through; SMG's CacheAwareConfig::default and SGLang's docs give others.
func DefaultCacheAware() CacheAwareConfig {
	return CacheAwareConfig{
		CacheThreshold:      0.3,
		BalanceAbsThreshold: 64,
		BalanceRelThreshold: 1.5,
		MaxTreeSize:         1 << 26,
		EvictionInterval:    60 * time.Second,
	}
}

// CacheAware is the cache_aware policy of one pool: an approximate prefix
// tree of what each worker was sent, per unit (text and tokens, as SMG
// keeps string and token trees apart). Workers are the indexes of the
// caller's pool; an index names the same worker until RemoveWorker. It is
// safe for concurrent use; its methods hold one mutex.
type CacheAware struct {
	cfg   CacheAwareConfig
	mu    sync.Mutex
	trees [2]*tree // by Unit.index
	picks []uint64 // picks per worker, for fair ties among equal loads
	path  []*node  // match's path, kept between picks to spare allocations
}

// NewCacheAware returns a policy with empty trees.
func NewCacheAware(cfg CacheAwareConfig) *CacheAware {
	return &CacheAware{cfg: cfg, trees: [2]*tree{newTree(UnitByte), newTree(UnitToken)}}
}

// Pick chooses a worker of p for a request with key (text bytes, or token
// ids 4 bytes each: unit says which) and records that the chosen worker
// now holds key. The rule is SMG's (policies/cache_aware.rs,
// select_worker): least loaded when the pool is imbalanced, else the
// longest match when it covers more than CacheThreshold of key, else the
// smallest tree. Pick keeps no reference to key or p.
func (c *CacheAware) Pick(key []byte, u Unit, p Pool) Choice {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[u.index()]
	ch := c.choose(t, key, p)
	if ch.Worker >= 0 {
		c.path = t.insertAfter(key, c.path, ch.Worker)
		c.picked(ch.Worker)
	}
	clear(c.path)
	return ch
}

// choose applies the rule without changing the tree, leaving in c.path
// the nodes it matched whole.
func (c *CacheAware) choose(t *tree, key []byte, p Pool) Choice {
	c.path = c.path[:0]
	lo, hi, _, n := p.stats()
	if n == 0 {
		return none
	}
	if hi-lo > c.cfg.BalanceAbsThreshold && float64(hi) > float64(lo)*c.cfg.BalanceRelThreshold {
		return Choice{Worker: c.leastLoaded(p), Reason: ReasonImbalance}
	}
	matched, at, path := t.match(key, p, c.path)
	c.path = path
	ratio := 0.0
	if len(key) > 0 {
		ratio = float64(matched) / float64(len(key))
	}
	if at != nil && ratio > c.cfg.CacheThreshold {
		return Choice{Worker: c.bestHolder(at, p), Reason: ReasonPrefixMatch, MatchRatio: ratio}
	}
	return Choice{Worker: c.smallest(t, p), Reason: ReasonSmallestTree, MatchRatio: ratio}
}

// less orders two usable workers for a tie: fewer in flight first, then
// fewer picks so far (SMG's (load, processed, index) order, issue #1714
// there: equal loads otherwise all go to the first worker), then the lower
// index.
func (c *CacheAware) less(p Pool, a, b int) bool {
	if p.Loads[a] != p.Loads[b] {
		return p.Loads[a] < p.Loads[b]
	}
	if pa, pb := c.pickCount(a), c.pickCount(b); pa != pb {
		return pa < pb
	}
	return a < b
}

func (c *CacheAware) leastLoaded(p Pool) int {
	best := -1
	for w := range p.Loads {
		if p.usable(w) && (best < 0 || c.less(p, w, best)) {
			best = w
		}
	}
	return best
}

// bestHolder returns, among the usable workers on n, the least loaded.
// SMG takes whichever tenant the node last cached; among workers holding
// the same prefix, the load is the better tie-break.
func (c *CacheAware) bestHolder(n *node, p Pool) int {
	best := -1
	for _, tn := range n.tenants {
		w := int(tn.worker)
		if w < len(p.Loads) && p.usable(w) && (best < 0 || c.less(p, w, best)) {
			best = w
		}
	}
	return best
}

// smallest returns the usable worker holding the fewest bytes in t.
func (c *CacheAware) smallest(t *tree, p Pool) int {
	best := -1
	for w := range p.Loads {
		if !p.usable(w) {
			continue
		}
		if best < 0 || t.sizeOf(w) < t.sizeOf(best) || t.sizeOf(w) == t.sizeOf(best) && c.less(p, w, best) {
			best = w
		}
	}
	return best
}

func (c *CacheAware) picked(w int) {
	if w >= len(c.picks) {
		c.picks = append(c.picks, make([]uint64, w+1-len(c.picks))...)
	}
	c.picks[w]++
}

func (c *CacheAware) pickCount(w int) uint64 {
	if w < len(c.picks) {
		return c.picks[w]
	}
	return 0
}

// evictBatch is how many nodes Evict removes per hold of the lock: each
// costs a few hundred nanoseconds of cache misses on a large tree, so a
// pick waits on an eviction a few microseconds, as on another pick
// (BenchmarkCacheAwareEvictStall).
const evictBatch = 16

// Evict trims each worker's share of each tree to MaxTreeSize, least
// recently used leaves first. The caller runs it every EvictionInterval.
// Its work is proportional to what it removes, not to the trees' size,
// and it releases the lock every evictBatch nodes, letting picks in; once
// it returns, every worker was within MaxTreeSize at some instant after
// it was called.
func (c *CacheAware) Evict() {
	for i := range c.trees {
		c.mu.Lock()
		c.trees[i].releaseSpare()
		c.mu.Unlock()
		for !c.evictSome(i) {
			// sync.Mutex lets the goroutine that unlocks take the lock
			// again before a woken waiter does, for up to a millisecond:
			// give the picks waiting their turn.
			runtime.Gosched()
		}
	}
}

// evictSome runs one bounded step of Evict on tree i.
func (c *CacheAware) evictSome(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees[i].evict(c.cfg.MaxTreeSize, evictBatch)
}

// AddWorker readies index w for a worker that joins the pool, or comes
// back: whatever an earlier worker at w left is forgotten, so that the
// newcomer starts with an empty tree and wins on smallest tree.
func (c *CacheAware) AddWorker(w int) {
	c.RemoveWorker(w)
}

// RemoveWorker forgets everything worker w was sent, for a worker that
// leaves the pool (SMG's remove_tenant). The caller must call it before it
// gives index w to another worker.
func (c *CacheAware) RemoveWorker(w int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.trees {
		t.remove(w)
	}
	if w < len(c.picks) {
		c.picks[w] = 0
	}
}

// Size returns the bytes of keys of unit u that worker w holds: what
// MaxTreeSize bounds, and the smallest-tree rule compares.
func (c *CacheAware) Size(w int, u Unit) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees[u.index()].sizeOf(w)
}
