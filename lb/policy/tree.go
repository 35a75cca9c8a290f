package policy

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"slices"
)

// tree is an approximate radix tree shared by the workers of one pool, as
// SMG's string and token trees are (crates/kv_index/src/string_tree.rs,
// Tree): each node holds an edge of key bytes and the workers ("tenants")
// whose requests passed through it, with when each last did. A worker on a
// node is also on every ancestor, so a node without tenants has no
// children left. It is not safe for concurrent use: CacheAware locks it.
type tree struct {
	unit  int
	root  node
	size  []int  // bytes of node text each worker holds, by worker
	clock uint64 // logical time of the last insert, for LRU order
}

type node struct {
	text     []byte // the edge's bytes, a multiple of the unit, owned
	parent   *node
	children map[uint32]*node // by the edge's first unit
	tenants  []tenant
}

// tenant is one worker on a node and when it last used the node.
type tenant struct {
	worker int32
	at     uint64
}

func newTree(u Unit) *tree {
	return &tree{unit: int(u)}
}

// first returns the key of the unit that starts b, for children maps.
func (t *tree) first(b []byte) uint32 {
	if t.unit == 1 {
		return uint32(b[0])
	}
	return binary.LittleEndian.Uint32(b)
}

// shared returns how many leading bytes a and b have in common, rounded
// down to whole units. Whole chunks are compared with bytes.Equal, which
// runs in vector instructions: a pick compares its key's 8 KB twice.
func (t *tree) shared(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for step := 256; i+step <= n && bytes.Equal(a[i:i+step], b[i:i+step]); {
		i += step
	}
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i - i%t.unit
}

// grow makes room for worker w in the per-worker sizes.
func (t *tree) grow(w int) {
	if w >= len(t.size) {
		t.size = append(t.size, make([]int, w+1-len(t.size))...)
	}
}

// sizeOf returns the bytes worker w holds.
func (t *tree) sizeOf(w int) int {
	if w < len(t.size) {
		return t.size[w]
	}
	return 0
}

// find returns the index of worker w in n's tenants, or -1.
func (n *node) find(w int) int {
	for i, tn := range n.tenants {
		if int(tn.worker) == w {
			return i
		}
	}
	return -1
}

// holdsUsable reports whether a worker p may choose is on n.
func (n *node) holdsUsable(p Pool) bool {
	for _, tn := range n.tenants {
		if int(tn.worker) < len(p.Loads) && p.usable(int(tn.worker)) {
			return true
		}
	}
	return false
}

// match returns how many bytes of key the tree holds for a usable worker
// and the node where that match ends (nil when none). A match may end
// inside a node's edge: its tenants are taken to hold the part matched, as
// SMG's match_prefix_with_counts does. The nodes whose edges key covers
// whole are appended to path, for insertAfter.
func (t *tree) match(key []byte, p Pool, path []*node) (int, *node, []*node) {
	n, matched, rest := &t.root, 0, key
	var last *node
	for len(rest) >= t.unit {
		c := n.children[t.first(rest)]
		if c == nil || !c.holdsUsable(p) {
			break
		}
		k := t.shared(rest, c.text)
		matched, last = matched+k, c
		if k < len(c.text) {
			break
		}
		rest, n, path = rest[k:], c, append(path, c)
	}
	return matched, last, path
}

// insert records that worker w now holds key: every node on the path gets
// w with the current time, the edge where the path leaves the tree is
// split, and what is left of the key becomes a new leaf.
func (t *tree) insert(key []byte, w int) {
	t.insertAfter(key, nil, w)
}

// insertAfter is insert for a key whose first nodes, path, match has
// already found: it skips comparing them again, as SMG's
// match_and_insert_with does in one descent.
func (t *tree) insertAfter(key []byte, path []*node, w int) {
	t.grow(w)
	t.clock++
	now := t.clock
	n, rest := &t.root, key[:len(key)-len(key)%t.unit]
	for _, c := range path {
		t.touch(c, w, now)
		rest, n = rest[len(c.text):], c
	}
	for len(rest) > 0 {
		f := t.first(rest)
		c := n.children[f]
		if c == nil {
			leaf := &node{text: slices.Clone(rest), parent: n, tenants: []tenant{{int32(w), now}}}
			if n.children == nil {
				n.children = make(map[uint32]*node, 1)
			}
			n.children[f] = leaf
			t.size[w] += len(rest)
			return
		}
		k := t.shared(rest, c.text)
		if k < len(c.text) {
			c = t.split(c, k)
		}
		t.touch(c, w, now)
		rest, n = rest[k:], c
	}
}

// touch marks n as used by worker w now.
func (t *tree) touch(n *node, w int, now uint64) {
	if i := n.find(w); i >= 0 {
		n.tenants[i].at = now
		return
	}
	n.tenants = append(n.tenants, tenant{int32(w), now})
	t.size[w] += len(n.text)
}

// split cuts c's edge after k bytes into a new parent holding the first k
// and c holding the rest; both get c's tenants, so no size changes. Both
// edges are copied, so that evicting one frees its bytes.
func (t *tree) split(c *node, k int) *node {
	mid := &node{
		text:     slices.Clone(c.text[:k]),
		parent:   c.parent,
		children: map[uint32]*node{t.first(c.text[k:]): c},
		tenants:  slices.Clone(c.tenants),
	}
	c.parent.children[t.first(c.text)] = mid
	c.text, c.parent = slices.Clone(c.text[k:]), mid
	return mid
}

// leafOf reports whether n holds worker w and none of its children do:
// only such nodes may lose w, which keeps a worker's nodes a subtree.
func (n *node) leafOf(w int) bool {
	if n.find(w) < 0 {
		return false
	}
	for _, c := range n.children {
		if c.find(w) >= 0 {
			return false
		}
	}
	return true
}

// drop removes worker w from n, which must hold it, and unlinks n from
// its parent when no worker is left on it.
func (t *tree) drop(n *node, w int) {
	i := n.find(w)
	n.tenants = slices.Delete(n.tenants, i, i+1)
	t.size[w] -= len(n.text)
	if len(n.tenants) == 0 && n != &t.root {
		delete(n.parent.children, t.first(n.text))
	}
}

// evict removes each worker's least recently used leaves until it holds at
// most max bytes, as SMG's evict_tenant_by_size does: a heap of (time,
// worker, node) over the nodes that are leaves for their worker, a parent
// joining the heap when its last child for that worker goes.
func (t *tree) evict(max int) {
	if !slices.ContainsFunc(t.size, func(s int) bool { return s > max }) {
		return
	}
	var h lruHeap
	t.walk(&t.root, func(n *node) {
		for _, tn := range n.tenants {
			if t.size[tn.worker] > max && n.leafOf(int(tn.worker)) {
				h = append(h, lruEntry{tn, n})
			}
		}
	})
	heap.Init(&h)
	for h.Len() > 0 {
		e := heap.Pop(&h).(lruEntry)
		w := int(e.worker)
		if t.size[w] <= max || !e.node.leafOf(w) {
			continue
		}
		t.drop(e.node, w)
		if p := e.node.parent; p != &t.root && p.leafOf(w) {
			heap.Push(&h, lruEntry{p.tenants[p.find(w)], p})
		}
	}
}

// remove takes worker w off every node, as if it had never been chosen.
func (t *tree) remove(w int) {
	t.walk(&t.root, func(n *node) {
		if n != &t.root && n.find(w) >= 0 {
			t.drop(n, w)
		}
	})
	if w < len(t.size) {
		t.size[w] = 0
	}
}

// walk calls f on n's descendants, children before parents, then on n, so
// that f may unlink the node it is given.
func (t *tree) walk(n *node, f func(*node)) {
	for _, c := range n.children {
		t.walk(c, f)
	}
	f(n)
}

type lruEntry struct {
	tenant
	node *node
}

// lruHeap orders entries oldest first.
type lruHeap []lruEntry

func (h lruHeap) Len() int           { return len(h) }
func (h lruHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h lruHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lruHeap) Push(x any)        { *h = append(*h, x.(lruEntry)) }
func (h *lruHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
