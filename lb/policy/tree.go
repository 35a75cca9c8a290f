package policy

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// tree is an approximate radix tree shared by the workers of one pool, as
// SMG's string and token trees are (crates/kv_index/src/string_tree.rs,
// Tree): each node holds an edge of key bytes and the workers ("tenants")
// whose requests passed through it. A worker on a node is also on every
// ancestor, so a node without tenants has no children left. Each worker's
// nodes are also on a list from least to most recently used (lru.go), so
// that eviction pops its oldest leaves without walking the tree; texts
// and nodes that eviction frees are used again (spare.go), so that a pick
// on a full tree allocates nothing. It is not safe for concurrent use:
// CacheAware locks it.
type tree struct {
	unit  int
	root  node
	size  []int     // bytes of node text each worker holds, by worker
	lru   []lruList // each worker's nodes, least recently used first
	spare spare     // texts and nodes freed since the last eviction
}

type node struct {
	text     []byte // the edge's bytes, a multiple of the unit, at the start of a block of its own
	parent   *node
	children map[uint32]*node // by the edge's first unit
	tenants  []tenant
}

// tenant is one worker on a node, and the node's neighbours on that
// worker's LRU list.
type tenant struct {
	worker       int32
	older, newer *node
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
		t.lru = append(t.lru, make([]lruList, w+1-len(t.lru))...)
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

// insertAfter records that worker w now holds key: every node on the
// path gets w, the edge where the path leaves the tree is split, and what
// is left of the key becomes a new leaf. The key's first nodes, path,
// match has already found: it skips comparing them again, as SMG's
// match_and_insert_with does in one descent. It returns path grown by the
// rest of the key's nodes, so that the caller may keep its array. The
// nodes become w's most recent, deepest first: on each worker's list a
// node comes before its parent, which lets eviction take the oldest node
// as a leaf.
func (t *tree) insertAfter(key []byte, path []*node, w int) []*node {
	t.grow(w)
	n, rest := &t.root, key[:len(key)-len(key)%t.unit]
	for _, c := range path {
		rest, n = rest[len(c.text):], c
	}
	for len(rest) > 0 {
		f := t.first(rest)
		c := n.children[f]
		if c == nil {
			t.addLeaf(n, f, rest, w)
			break
		}
		k := t.shared(rest, c.text)
		if k < len(c.text) {
			c = t.split(c, k)
		}
		rest, n, path = rest[k:], c, append(path, c)
	}
	for i := len(path) - 1; i >= 0; i-- {
		t.touch(path[i], w)
	}
	return path
}

// addLeaf hangs a new node under n, holding text for worker w.
func (t *tree) addLeaf(n *node, f uint32, text []byte, w int) {
	leaf := t.newNode(n, text)
	leaf.tenants = append(leaf.tenants, tenant{worker: int32(w)})
	t.link(leaf, w)
	if n.children == nil {
		n.children = make(map[uint32]*node, 1)
	}
	n.children[f] = leaf
	t.size[w] += len(text)
}

// touch marks n as used by worker w now.
func (t *tree) touch(n *node, w int) {
	if n.find(w) >= 0 {
		t.unlink(n, w)
	} else {
		n.tenants = append(n.tenants, tenant{worker: int32(w)})
		t.size[w] += len(n.text)
	}
	t.link(n, w)
}

// split cuts c's edge after k bytes into a new parent holding the first k
// and c holding the rest; both get c's tenants, so no size changes, and
// the parent comes just after c on each tenant's list. The rest moves to
// the start of c's block, so that each node owns its block.
func (t *tree) split(c *node, k int) *node {
	mid := t.newNode(c.parent, c.text[:k])
	if mid.children == nil {
		mid.children = make(map[uint32]*node, 1)
	}
	mid.children[t.first(c.text[k:])] = c
	c.parent.children[t.first(c.text)] = mid
	c.text, c.parent = c.text[:copy(c.text, c.text[k:])], mid
	for _, tn := range c.tenants {
		mid.tenants = append(mid.tenants, tenant{worker: tn.worker})
		t.linkAfter(mid, c, int(tn.worker))
	}
	return mid
}

// drop removes worker w from n, which must hold it, and unlinks n from
// its parent, to be used again, when no worker is left on it.
func (t *tree) drop(n *node, w int) {
	t.unlink(n, w)
	i := n.find(w)
	n.tenants = slices.Delete(n.tenants, i, i+1)
	t.size[w] -= len(n.text)
	if len(n.tenants) == 0 && n != &t.root {
		delete(n.parent.children, t.first(n.text))
		t.freeNode(n)
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
