package policy

// lruList is one worker's nodes in a tree, least recently used first,
// linked through the worker's tenant on each node. A node always comes
// before its parent (insertAfter touches the deepest first, split puts a
// new parent just after its child), so the oldest node holds the worker
// on none of its children: it is a leaf for that worker, and SMG's
// eviction order (evict_tenant_by_size: a heap of leaves by last access,
// a parent joining when its last child goes) is popping the list's head.
type lruList struct {
	oldest, newest *node
}

// entry returns worker w's tenant on n, which must hold w. The pointer is
// valid until n's tenants change.
func (n *node) entry(w int) *tenant {
	i := n.find(w)
	if i < 0 {
		panic("BUG: a node on a worker's LRU list does not hold the worker")
	}
	return &n.tenants[i]
}

// link puts n, which holds w and is not on w's list, at the list's end.
func (t *tree) link(n *node, w int) {
	l, e := &t.lru[w], n.entry(w)
	e.older, e.newer = l.newest, nil
	if l.newest != nil {
		l.newest.entry(w).newer = n
	} else {
		l.oldest = n
	}
	l.newest = n
}

// linkAfter puts n, which holds w and is not on w's list, just after at.
func (t *tree) linkAfter(n, at *node, w int) {
	e, a := n.entry(w), at.entry(w)
	e.older, e.newer = at, a.newer
	if a.newer != nil {
		a.newer.entry(w).older = n
	} else {
		t.lru[w].newest = n
	}
	a.newer = n
}

// unlink takes n off w's list.
func (t *tree) unlink(n *node, w int) {
	l, e := &t.lru[w], n.entry(w)
	if e.older != nil {
		e.older.entry(w).newer = e.newer
	} else {
		l.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.entry(w).older = e.older
	} else {
		l.newest = e.older
	}
	e.older, e.newer = nil, nil
}

// evict removes the least recently used leaves of each worker above max
// bytes, at most budget of them, and reports whether every worker is now
// within max. Its cost is that of what it removes, never of the tree:
// CacheAware releases the lock between two calls.
func (t *tree) evict(max, budget int) bool {
	for w := range t.size {
		for t.size[w] > max {
			if budget == 0 {
				return false
			}
			n := t.lru[w].oldest
			if n == nil {
				panic("BUG: a worker holds bytes but no node")
			}
			t.drop(n, w)
			budget--
		}
	}
	return true
}
