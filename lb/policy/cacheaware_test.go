package policy

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// only returns a usable mask of n workers with just w set.
func only(n, w int) []bool {
	u := make([]bool, n)
	u[w] = true
	return u
}

// give makes worker w of an n-worker pool hold key, by picking with only
// w usable.
func give(t *testing.T, c *CacheAware, n, w int, key string) {
	t.Helper()
	ch := c.Pick([]byte(key), UnitByte, Pool{Loads: make([]int, n), Usable: only(n, w)})
	if ch.Worker != w {
		t.Fatalf("priming: got worker %d; want %d", ch.Worker, w)
	}
}

func testConfig() CacheAwareConfig {
	cfg := DefaultCacheAware()
	cfg.BalanceAbsThreshold = 4
	cfg.BalanceRelThreshold = 1.5
	return cfg
}

func TestCacheAwareImbalanceSwitch(t *testing.T) {
	sys := strings.Repeat("system prompt ", 20)
	for _, tc := range []struct {
		name   string
		loads  []int
		want   int
		reason Reason
	}{
		{"balanced", []int{0, 0, 0}, 0, ReasonPrefixMatch},
		{"abs crossed, rel not", []int{20, 15, 16}, 0, ReasonPrefixMatch}, // 20-15 > 4, 20 < 22.5
		{"rel crossed, abs not", []int{4, 1, 2}, 0, ReasonPrefixMatch},    // 4 > 1.5, 4-1 <= 4
		{"abs at its bound", []int{5, 1, 1}, 0, ReasonPrefixMatch},        // 5-1 = 4, not > 4
		{"both crossed", []int{10, 2, 3}, 1, ReasonImbalance},
		{"both crossed, ties to lower index", []int{10, 3, 3}, 1, ReasonImbalance},
		{"holder is the least loaded", []int{0, 9, 10}, 0, ReasonImbalance},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCacheAware(testConfig())
			give(t, c, 3, 0, sys)
			got := c.Pick([]byte(sys+"question"), UnitByte, Pool{Loads: tc.loads})
			if got.Worker != tc.want || got.Reason != tc.reason {
				t.Fatalf("got worker %d (%s); want %d (%s)", got.Worker, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

func TestCacheAwareThreshold(t *testing.T) {
	held := strings.Repeat("a", 40)
	for _, tc := range []struct {
		name      string
		threshold float64
		key       string
		want      int
		reason    Reason
		ratio     float64
	}{
		{"match above threshold", 0.3, held + strings.Repeat("b", 60), 0, ReasonPrefixMatch, 0.4},
		{"match below threshold", 0.5, held + strings.Repeat("b", 60), 1, ReasonSmallestTree, 0.4},
		{"match equal to threshold loses", 0.4, held + strings.Repeat("b", 60), 1, ReasonSmallestTree, 0.4},
		{"threshold 0 takes any match", 0, held[:1] + strings.Repeat("b", 99), 0, ReasonPrefixMatch, 0.01},
		{"no match at threshold 0", 0, strings.Repeat("b", 100), 1, ReasonSmallestTree, 0},
		{"whole key held", 0.99, held, 0, ReasonPrefixMatch, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.CacheThreshold = tc.threshold
			c := NewCacheAware(cfg)
			give(t, c, 2, 0, held)
			got := c.Pick([]byte(tc.key), UnitByte, Pool{Loads: []int{0, 0}})
			if got.Worker != tc.want || got.Reason != tc.reason || got.MatchRatio != tc.ratio {
				t.Fatalf("got %+v (%s); want worker %d (%s) ratio %v", got, got.Reason, tc.want, tc.reason, tc.ratio)
			}
		})
	}
}

func TestCacheAwareSmallestTree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  []string // by worker
		loads []int
		want  int
	}{
		{"empty trees tie to lowest load", []string{"", "", ""}, []int{2, 1, 2}, 1},
		{"empty trees tie to lowest index", []string{"", "", ""}, []int{0, 0, 0}, 0},
		{"fewest bytes", []string{"xxxxxxxx", "yy", "zzzz"}, []int{0, 0, 0}, 1},
		{"fewest bytes beats load", []string{"xxxxxxxx", "yyyy", "zz"}, []int{0, 0, 3}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCacheAware(testConfig())
			for w, k := range tc.held {
				if k != "" {
					give(t, c, len(tc.held), w, k)
				}
			}
			got := c.Pick([]byte("novel request"), UnitByte, Pool{Loads: tc.loads})
			if got.Worker != tc.want || got.Reason != ReasonSmallestTree {
				t.Fatalf("got worker %d (%s); want %d (smallest_tree)", got.Worker, got.Reason, tc.want)
			}
		})
	}
}

// Equal loads and equal trees take turns rather than all landing on the
// first worker (SMG's tie-break by processed requests).
func TestCacheAwareTiesTakeTurns(t *testing.T) {
	c := NewCacheAware(testConfig())
	var got []int
	for i := range 4 {
		// Distinct first bytes: each key is new, and each worker's tree
		// grows by the same amount.
		got = append(got, c.Pick([]byte(fmt.Sprintf("%c-key", 'a'+i)), UnitByte, Pool{Loads: []int{0, 0, 0, 0}}).Worker)
	}
	if fmt.Sprint(got) != "[0 1 2 3]" {
		t.Fatalf("got %v; want [0 1 2 3]", got)
	}
}

func TestCacheAwareUnusableSkipped(t *testing.T) {
	long := strings.Repeat("p", 100)
	for _, tc := range []struct {
		name   string
		usable []bool
		want   int
		reason Reason
	}{
		{"best holder usable", []bool{true, true, true}, 0, ReasonPrefixMatch},
		{"best holder not usable: shorter holder", []bool{false, true, true}, 1, ReasonPrefixMatch},
		{"no holder usable: smallest tree", []bool{false, false, true}, 2, ReasonSmallestTree},
		{"none usable", []bool{false, false, false}, -1, ReasonNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCacheAware(testConfig())
			give(t, c, 3, 0, long)      // 100 bytes
			give(t, c, 3, 1, long[:60]) // 60 of them
			give(t, c, 3, 2, "zz")
			got := c.Pick([]byte(long), UnitByte, Pool{Loads: []int{0, 0, 0}, Usable: tc.usable})
			if got.Worker != tc.want || got.Reason != tc.reason {
				t.Fatalf("got worker %d (%s); want %d (%s)", got.Worker, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

// A token key's match ends on a token: keys that share 6 bytes share one
// whole token.
func TestCacheAwareTokenBoundary(t *testing.T) {
	c := NewCacheAware(testConfig())
	a := AppendTokens(nil, []uint32{0x01020304, 0x0A0B0C0D})
	b := AppendTokens(nil, []uint32{0x01020304, 0x0A0BFFFF}) // shares bytes 0-5
	n := 2
	if w := c.Pick(a, UnitToken, Pool{Loads: make([]int, n), Usable: only(n, 0)}).Worker; w != 0 {
		t.Fatalf("priming: got worker %d; want 0", w)
	}
	got := c.Pick(b, UnitToken, Pool{Loads: make([]int, n)})
	if got.MatchRatio != 0.5 || got.Worker != 0 {
		t.Fatalf("got %+v; want worker 0 with ratio 0.5 (one token of two)", got)
	}
	if s := c.Size(0, UnitToken); s != 12 {
		t.Fatalf("worker 0 holds %d bytes; want 12 (shared token + two second tokens)", s)
	}
	if s := c.Size(0, UnitByte); s != 0 {
		t.Fatalf("text tree holds %d bytes; want 0 (token keys go to their own tree)", s)
	}
}

func TestCacheAwareEvict(t *testing.T) {
	// Worker 0 gets three 10-byte keys in three groups, then uses the first
	// again: the LRU order is b, c, a.
	c := NewCacheAware(CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeSize: 20})
	for _, k := range []string{"aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc", "aaaaaaaaaa"} {
		give(t, c, 2, 0, k)
	}
	give(t, c, 2, 1, "dddddddddd")
	if s := c.Size(0, UnitByte); s != 30 {
		t.Fatalf("before Evict worker 0 holds %d bytes; want 30", s)
	}
	c.Evict()
	if s0, s1 := c.Size(0, UnitByte), c.Size(1, UnitByte); s0 != 20 || s1 != 10 {
		t.Fatalf("after Evict sizes are %d, %d; want 20, 10", s0, s1)
	}
	for _, tc := range []struct {
		key  string
		want Reason
	}{{"aaaaaaaaaa", ReasonPrefixMatch}, {"cccccccccc", ReasonPrefixMatch}, {"bbbbbbbbbb", ReasonSmallestTree}} {
		// Only worker 0 usable: the reason says whether it still holds key.
		got := c.choose(c.trees[0], []byte(tc.key), Pool{Loads: []int{0, 0}, Usable: only(2, 0)})
		if got.Reason != tc.want {
			t.Errorf("%s: got %s; want %s", tc.key, got.Reason, tc.want)
		}
	}
}

// Eviction trims a long path from its end: a shared prefix stays while its
// suffixes go.
func TestCacheAwareEvictKeepsSharedPrefix(t *testing.T) {
	sys := strings.Repeat("s", 50)
	c := NewCacheAware(CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeSize: 60})
	for i := range 5 {
		give(t, c, 1, 0, sys+fmt.Sprintf("%c%08d", 'a'+i, i))
	}
	if s := c.Size(0, UnitByte); s != 50+5*9 {
		t.Fatalf("before Evict: %d bytes; want 95", s)
	}
	c.Evict()
	if s := c.Size(0, UnitByte); s != 50+9 {
		t.Fatalf("after Evict: %d bytes; want 59 (the prefix and the newest question)", s)
	}
	got := c.choose(c.trees[0], []byte(sys+"e00000004"), Pool{Loads: []int{0}})
	if got.MatchRatio != 1 {
		t.Fatalf("newest question matches %v; want 1", got.MatchRatio)
	}
}

func TestCacheAwareWorkerLeavesAndComesBack(t *testing.T) {
	sys := strings.Repeat("shared ", 10)
	c := NewCacheAware(testConfig())
	give(t, c, 3, 0, sys)
	give(t, c, 3, 1, sys)
	give(t, c, 3, 2, "other")
	c.RemoveWorker(0)
	if s := c.Size(0, UnitByte); s != 0 {
		t.Fatalf("removed worker holds %d bytes; want 0", s)
	}
	if s := c.Size(1, UnitByte); s != len(sys) {
		t.Fatalf("worker 1 holds %d bytes; want %d (untouched)", s, len(sys))
	}
	// The request for sys now goes to worker 1, the only holder left, even
	// though worker 0 is usable again.
	if got := c.Pick([]byte(sys), UnitByte, Pool{Loads: []int{0, 1, 0}}); got.Worker != 1 || got.Reason != ReasonPrefixMatch {
		t.Fatalf("after removal: got worker %d (%s); want 1 (prefix_match)", got.Worker, got.Reason)
	}
	c.AddWorker(0)
	if got := c.Pick([]byte("fresh text"), UnitByte, Pool{Loads: []int{0, 0, 0}}); got.Worker != 0 || got.Reason != ReasonSmallestTree {
		t.Fatalf("after it came back: got worker %d (%s); want 0 (smallest_tree)", got.Worker, got.Reason)
	}
	if got := c.Pick([]byte("fresh text!"), UnitByte, Pool{Loads: []int{0, 0, 0}}); got.Worker != 0 || got.Reason != ReasonPrefixMatch {
		t.Fatalf("its new text: got worker %d (%s); want 0 (prefix_match)", got.Worker, got.Reason)
	}
}

// The pool may grow: a worker index the policy has not seen is a worker
// with an empty tree.
func TestCacheAwarePoolGrows(t *testing.T) {
	c := NewCacheAware(testConfig())
	give(t, c, 1, 0, "aaaa")
	if got := c.Pick([]byte("bbbb"), UnitByte, Pool{Loads: []int{0, 0}}); got.Worker != 1 {
		t.Fatalf("got worker %d; want 1 (new, empty)", got.Worker)
	}
}

// Many goroutines pick while eviction runs; run with -race.
func TestCacheAwareConcurrent(t *testing.T) {
	c := NewCacheAware(CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, MaxTreeSize: 4096})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var key bytes.Buffer
			for i := range 200 {
				key.Reset()
				fmt.Fprintf(&key, "group %d %s question %d", i%4, strings.Repeat("x", 100), g*1000+i)
				if ch := c.Pick(key.Bytes(), UnitByte, Pool{Loads: []int{1, 2, 3, 4}}); ch.Worker < 0 {
					t.Errorf("got no worker")
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			c.Evict()
		}
	})
	wg.Wait()
	c.Evict()
	for w := range 4 {
		if s := c.Size(w, UnitByte); s > 4096 {
			t.Errorf("worker %d holds %d bytes after Evict; want at most 4096", w, s)
		}
	}
}
