package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkTree fails unless t's lists and sizes agree with its nodes: each
// worker's list holds exactly the nodes holding it, each before its
// parent, linked both ways; its size is their text's length; every text
// sits at the start of a block of a class (or of its own beyond
// maxBlock).
func checkTree(tb testing.TB, t *tree) {
	tb.Helper()
	holders := make([]map[*node]bool, len(t.size))
	for w := range holders {
		holders[w] = map[*node]bool{}
	}
	t.walk(&t.root, func(n *node) {
		if n == &t.root {
			return
		}
		if c, size := blockClass(cap(n.text)); cap(n.text) <= maxBlock && size != cap(n.text) {
			tb.Fatalf("a text of %d bytes has a block of %d (class %d is %d)", len(n.text), cap(n.text), c, size)
		}
		for _, tn := range n.tenants {
			holders[tn.worker][n] = true
		}
	})
	for w, held := range holders {
		pos, size := map[*node]int{}, 0
		var prev *node
		for n := t.lru[w].oldest; n != nil; n = n.entry(w).newer {
			if n.entry(w).older != prev {
				tb.Fatalf("worker %d: list is not linked both ways", w)
			}
			if _, ok := pos[n]; ok {
				tb.Fatalf("worker %d: a node is twice on its list", w)
			}
			pos[n], size, prev = len(pos), size+len(n.text), n
		}
		if t.lru[w].newest != prev || len(pos) != len(held) || size != t.size[w] {
			tb.Fatalf("worker %d: list of %d nodes, %d bytes; tree has %d nodes, size %d", w, len(pos), size, len(held), t.size[w])
		}
		for n := range held {
			at, ok := pos[n]
			if !ok {
				tb.Fatalf("worker %d: a node holding it is not on its list", w)
			}
			if p := n.parent; p != &t.root && pos[p] <= at {
				tb.Fatalf("worker %d: a node comes after its parent (%d, %d)", w, at, pos[p])
			}
		}
	}
}

// Random picks, evictions and removals over keys sharing prefixes keep
// the LRU lists in step with the tree, and Evict leaves every worker
// within the bound.
func TestCacheAwareLRUInvariant(t *testing.T) {
	const maxSize = 300
	rng := rand.New(rand.NewPCG(3, 4))
	c := NewCacheAware(CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeSize: maxSize})
	word := func() string { return []string{"ab", "abc", "b", "bca", "ca", "cab"}[rng.IntN(6)] }
	for i := range 3000 {
		switch r := rng.IntN(100); {
		case r < 3:
			c.RemoveWorker(rng.IntN(4))
		case r < 10:
			c.Evict()
			for w := range 4 {
				if s := c.Size(w, UnitByte); s > maxSize {
					t.Fatalf("step %d: worker %d holds %d bytes after Evict; want at most %d", i, w, s, maxSize)
				}
			}
		default:
			key := fmt.Sprint(word(), word(), word(), word(), word(), word())
			loads := []int{rng.IntN(3), rng.IntN(3), rng.IntN(3), rng.IntN(3)}
			c.Pick([]byte(key), UnitByte, Pool{Loads: loads, Usable: []bool{true, rng.IntN(2) == 0, true, rng.IntN(4) > 0}})
		}
		checkTree(t, c.trees[0])
	}
}

// The oldest node on a worker's list goes first, and it is a leaf: Evict
// takes a worker's least recently used key whole before touching the
// prefix it shares with newer ones.
func TestCacheAwareEvictOrder(t *testing.T) {
	c := NewCacheAware(CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeSize: 1 << 20})
	for _, k := range []string{"shared-one", "shared-two", "other", "shared-one"} {
		give(t, c, 1, 0, k)
	}
	tr := c.trees[0]
	var got []string
	for tr.size[0] > 0 {
		n := tr.lru[0].oldest
		got = append(got, string(n.text))
		tr.evict(tr.size[0]-1, 1)
		checkTree(t, tr)
	}
	if want := "[two other one shared-]"; fmt.Sprint(got) != want {
		t.Fatalf("evicted %v; want %v", got, want)
	}
}

func TestBlockClass(t *testing.T) {
	f := func(n, wantClass, wantSize int) {
		t.Helper()
		if c, size := blockClass(n); c != wantClass || size != wantSize {
			t.Fatalf("blockClass(%d) = %d, %d; want %d, %d", n, c, size, wantClass, wantSize)
		}
	}
	f(1, 0, 64)
	f(64, 0, 64)
	f(65, 1, 80)
	f(128, 4, 128)
	f(129, 5, 160)
	f(512, 12, 512)
	f(513, 13, 640)
	f(maxBlock, classes-1, maxBlock)
}
