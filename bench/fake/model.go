package fake

import (
	"sync"
	"sync/atomic"
	"time"
)

// The performance model: each DP rank of a server stands for one SGLang
// scheduler, with a prefix cache (cache.go), a bound on the prompts it
// computes at once (Config.MaxPrefills), a KV pool in tokens
// (Config.MaxTotalTokens) and a decode batch whose size slows every token
// step (Config.BatchTokenDelay). Its counters are the load /v1/loads
// reports (loads.go). Every part is off at its zero Config value.

// rankModel is the model of one DP rank.
type rankModel struct {
	cache *prefixCache  // nil without Config.CacheTokens, and on a decode
	slots chan struct{} // a token per prompt being computed; nil: no bound
	kv    *tokenPool    // nil without Config.MaxTotalTokens, and on a prefill
	load  rankLoad
}

// rankLoad counts what a rank holds, in items (a prompt or sample of a
// request) and tokens.
type rankLoad struct {
	prefilling   atomic.Int64 // items being computed
	decoding     atomic.Int64 // items generating: the decode batch
	waiting      atomic.Int64 // items queued for a slot, for KV room, or for their KV transfer
	usedTokens   atomic.Int64 // KV tokens held by the items being served
	waitTokens   atomic.Int64 // prompt tokens of the waiting items
	waitUncached atomic.Int64 // uncached prompt tokens of the items waiting for a slot
	promptTokens atomic.Uint64
	cachedTokens atomic.Uint64
}

// newRankModels builds the model of each DP rank for cfg.
func newRankModels(cfg Config) []rankModel {
	ranks := make([]rankModel, cfg.DPSize)
	for i := range ranks {
		rm := &ranks[i]
		if cfg.CacheTokens > 0 && cfg.Role != RoleDecode {
			rm.cache = newPrefixCache(cfg.CacheTokens / cfg.PageSize)
		}
		if cfg.MaxPrefills > 0 {
			rm.slots = make(chan struct{}, cfg.MaxPrefills)
		}
		if cfg.MaxTotalTokens > 0 && cfg.Role != RolePrefill {
			rm.kv = &tokenPool{capacity: cfg.MaxTotalTokens}
		}
	}
	return ranks
}

// prefillCost is the time a prompt of tokens tokens, cached of them
// cached, takes to compute.
func (s *Server) prefillCost(tokens, cached int) time.Duration {
	return s.cfg.PrefillDelay + time.Duration(tokens-cached)*s.cfg.PrefillTokenDelay
}

// cachedPrefix is how many tokens of it rm's cache holds: whole blocks,
// leaving at least one prompt token to compute, as SGLang caps a prefix
// match at the input length minus one (schedule_batch.py,
// _compute_max_prefix_len).
func (s *Server) cachedPrefix(rm *rankModel, it *item) int {
	if rm.cache == nil {
		return 0
	}
	page := s.cfg.PageSize
	return rm.cache.match(it.blocks, (it.promptTokens-1)/page) * page
}

// compute is the prefill of it on its rank: wait for a slot, take its KV
// tokens (unless a decode took them before), find its cached prefix, spend
// the prompt's cost, cache the prompt. It reports false if the call was
// aborted or the server closed first.
func (s *Server) compute(c *call, it *item) bool {
	rm := &s.ranks[it.dpRank]
	if rm.slots != nil {
		uncached := int64(it.promptTokens - s.cachedPrefix(rm, it))
		rm.load.waitUncached.Add(uncached)
		ok := s.wait(rm, it, func() bool { return s.acquireSlot(c, rm) })
		rm.load.waitUncached.Add(-uncached)
		if !ok {
			return false
		}
		defer func() { <-rm.slots }()
	}
	if it.reserved == 0 && !s.reserve(c, it) {
		return false
	}
	it.cached = s.cachedPrefix(rm, it)
	rm.load.prefilling.Add(1)
	defer rm.load.prefilling.Add(-1)
	if !s.pause(c, s.prefillCost(it.promptTokens, it.cached)) {
		return false
	}
	if rm.cache != nil {
		rm.cache.insert(it.blocks)
	}
	rm.load.promptTokens.Add(uint64(it.promptTokens))
	rm.load.cachedTokens.Add(uint64(it.cached))
	return true
}

// acquireSlot takes one of rm's prefill slots, unless the call is aborted
// or the server closes first.
func (s *Server) acquireSlot(c *call, rm *rankModel) bool {
	select {
	case rm.slots <- struct{}{}:
		return true
	case <-c.done:
	case <-s.quit:
	}
	return false
}

// wait runs f, which blocks, with it counted as waiting on rm.
func (s *Server) wait(rm *rankModel, it *item, f func() bool) bool {
	rm.load.waiting.Add(1)
	rm.load.waitTokens.Add(int64(it.promptTokens))
	defer func() {
		rm.load.waiting.Add(-1)
		rm.load.waitTokens.Add(int64(-it.promptTokens))
	}()
	return f()
}

// reserve takes the KV tokens it holds while it is served: its prompt and
// its max tokens, waiting for room when the rank's pool is bounded. It
// reports false if the call was aborted or the server closed first; else
// release must give them back.
func (s *Server) reserve(c *call, it *item) bool {
	rm := &s.ranks[it.dpRank]
	n := it.promptTokens + s.tokensOf(it)
	if rm.kv != nil && !s.wait(rm, it, func() bool { return rm.kv.acquire(n, c.done, s.quit) }) {
		return false
	}
	it.reserved = n
	rm.load.usedTokens.Add(int64(n))
	return true
}

// release gives back the KV tokens reserve took for each item of r.
func (s *Server) release(r *request) {
	for i := range r.items {
		it := &r.items[i]
		if it.reserved == 0 {
			continue
		}
		rm := &s.ranks[it.dpRank]
		rm.load.usedTokens.Add(int64(-it.reserved))
		if rm.kv != nil {
			rm.kv.release(it.reserved)
		}
		it.reserved = 0
	}
}

// startDecoding counts the items of r that generate tokens in their
// ranks' decode batches; stopDecoding takes them out.
func (s *Server) startDecoding(r *request) { s.countDecoding(r, 1) }
func (s *Server) stopDecoding(r *request)  { s.countDecoding(r, -1) }

func (s *Server) countDecoding(r *request, d int64) {
	for i := range r.items {
		if s.tokensOf(&r.items[i]) > 0 {
			s.ranks[r.items[i].dpRank].load.decoding.Add(d)
		}
	}
}

// tokenDelay is the time of r's next token step: TokenDelay, plus
// BatchTokenDelay for each other item generating on the busiest rank that
// serves r.
func (s *Server) tokenDelay(r *request) time.Duration {
	if s.cfg.BatchTokenDelay == 0 {
		return s.cfg.TokenDelay
	}
	batch := int64(1)
	for i := range r.items {
		batch = max(batch, s.ranks[r.items[i].dpRank].load.decoding.Load())
	}
	return s.cfg.TokenDelay + time.Duration(batch-1)*s.cfg.BatchTokenDelay
}

// tokenPool is a DP rank's KV pool, in tokens: acquire waits, first come
// first served, until the tokens fit. It is safe for concurrent use.
type tokenPool struct {
	mu       sync.Mutex
	capacity int
	used     int
	queue    []*poolWaiter
}

// poolWaiter is an acquire waiting for room; ready is closed once granted.
type poolWaiter struct {
	n       int
	granted bool
	ready   chan struct{}
}

// acquire takes n tokens, waiting until they fit (or, for more than the
// whole pool, until it is empty) behind earlier waiters. It reports false,
// having taken nothing, if stop or quit closes first.
func (p *tokenPool) acquire(n int, stop, quit <-chan struct{}) bool {
	p.mu.Lock()
	if len(p.queue) == 0 && p.fits(n) {
		p.used += n
		p.mu.Unlock()
		return true
	}
	w := &poolWaiter{n: n, ready: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-stop:
	case <-quit:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		p.used -= n
	} else {
		for i, q := range p.queue {
			if q == w {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	p.grant()
	return false
}

// release gives n tokens back and lets the waiters that now fit in.
func (p *tokenPool) release(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used -= n
	p.grant()
}

func (p *tokenPool) fits(n int) bool { return p.used == 0 || p.used+n <= p.capacity }

// grant lets in the waiters at the head of the queue that fit. p.mu is
// held.
func (p *tokenPool) grant() {
	for len(p.queue) > 0 && p.fits(p.queue[0].n) {
		w := p.queue[0]
		p.queue = p.queue[1:]
		p.used += w.n
		w.granted = true
		close(w.ready)
	}
}
