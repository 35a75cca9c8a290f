package policy

import "math/bits"

// Texts are kept in blocks of a few sizes, four to each power of two (as
// Go's allocator's size classes, wasting at most a fifth), from
// minBlock to maxBlock bytes; longer texts get blocks of their own size
// and go to the garbage collector when freed.
const (
	minBlock = 64
	maxBlock = 1 << 20
	classes  = 1 + 4*(20-6)
)

// spare holds what eviction freed, for inserts to use again instead of
// allocating: a pick on a full tree then allocates nothing, and the
// garbage collector, whose cycles slowed the slowest picks, has nothing
// to do. Each eviction first lets go of whatever the picks since the last
// one did not use, so that spares never outgrow what an interval's
// traffic needs.
type spare struct {
	blocks [classes][][]byte // empty slices, by class
	nodes  []*node           // zeroed but for the capacities they keep
}

// blockClass returns the class of blocks holding n bytes, and its size.
func blockClass(n int) (class, size int) {
	if n <= minBlock {
		return 0, minBlock
	}
	b := bits.Len(uint(n - 1)) // 2^(b-1) < n <= 2^b
	shift := b - 3
	k := (n + 1<<shift - 1) >> shift // 5 to 8 eighths of 2^b
	return 1 + 4*(b-7) + k - 5, k << shift
}

// newNode returns a node under parent holding a copy of text.
func (t *tree) newNode(parent *node, text []byte) *node {
	var n *node
	if i := len(t.spare.nodes) - 1; i >= 0 {
		n, t.spare.nodes[i] = t.spare.nodes[i], nil
		t.spare.nodes = t.spare.nodes[:i]
	} else {
		n = new(node)
	}
	n.parent = parent
	n.text = append(t.block(len(text)), text...)
	return n
}

// block returns an empty slice with room for n bytes.
func (t *tree) block(n int) []byte {
	if n > maxBlock {
		return make([]byte, 0, n)
	}
	c, size := blockClass(n)
	free := t.spare.blocks[c]
	if i := len(free) - 1; i >= 0 {
		b := free[i]
		free[i] = nil
		t.spare.blocks[c] = free[:i]
		return b
	}
	return make([]byte, 0, size)
}

// freeNode keeps n, which is out of the tree and on no list, and its text
// for newNode. Its children map, empty, and tenants array stay with it.
func (t *tree) freeNode(n *node) {
	if b := n.text; cap(b) <= maxBlock {
		c, _ := blockClass(cap(b))
		t.spare.blocks[c] = append(t.spare.blocks[c], b[:0])
	}
	*n = node{children: n.children, tenants: n.tenants[:0]}
	t.spare.nodes = append(t.spare.nodes, n)
}

// releaseSpare lets the garbage collector have the spares.
func (t *tree) releaseSpare() {
	t.spare = spare{}
}
