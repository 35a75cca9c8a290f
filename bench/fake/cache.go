package fake

import "sync"

// prefixCache is a prefill's prefix cache, standing for SGLang's radix
// cache (mem_cache/radix_cache.py): an LRU of chained block hashes
// (tokens.go), bounded in blocks. A prompt's cached prefix is its leading
// run of blocks present in the cache; since each block's hash covers its
// whole prefix, a changed early block misses everything after it.
//
// Recency runs from a prompt's last block to its first: touching a prompt
// makes its first block the most recent and its last the least, so eviction
// takes the ends of prompts before their shared beginnings, as SGLang
// evicts the leaves of its radix tree first. All methods are safe for
// concurrent use.
type prefixCache struct {
	mu       sync.Mutex
	capacity int // in blocks, at least 1
	blocks   map[uint64]*cacheEntry
	head     cacheEntry // sentinel: head.next is the most recent entry
}

// cacheEntry is one cached block in the recency list.
type cacheEntry struct {
	hash       uint64
	prev, next *cacheEntry
}

// newPrefixCache returns a cache of capacity blocks (at least 1).
func newPrefixCache(capacity int) *prefixCache {
	c := &prefixCache{capacity: max(capacity, 1), blocks: make(map[uint64]*cacheEntry)}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

// match is the number of leading blocks of blocks that are cached, at most
// limit. It does not change recency: it is a look, not a use.
func (c *prefixCache) match(blocks []uint64, limit int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < min(len(blocks), limit) && c.blocks[blocks[n]] != nil {
		n++
	}
	return n
}

// insert caches every block of a computed prompt and makes it the most
// recent, first block most recent of all, then evicts the least recent
// blocks beyond capacity.
func (c *prefixCache) insert(blocks []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(blocks) - 1; i >= 0; i-- {
		e := c.blocks[blocks[i]]
		if e == nil {
			e = &cacheEntry{hash: blocks[i]}
			c.blocks[e.hash] = e
		} else {
			e.unlink()
		}
		c.pushFront(e)
	}
	for len(c.blocks) > c.capacity {
		e := c.head.prev
		e.unlink()
		delete(c.blocks, e.hash)
	}
}

// len is the number of cached blocks.
func (c *prefixCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.blocks)
}

// flush empties the cache, as SGLang's /flush_cache resets its radix tree.
func (c *prefixCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.blocks)
	c.head.prev, c.head.next = &c.head, &c.head
}

func (c *prefixCache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

func (e *cacheEntry) unlink() {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
}
