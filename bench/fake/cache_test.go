package fake

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// The prefix cache's choices: what matches after which inserts, with a
// capacity of 4 blocks of one token (4 bytes of text) each.
func TestPrefixCache(t *testing.T) {
	t.Parallel()
	const a, b, c = "aaaabbbbcccc", "xxxxyyyyzzzz", "ppppqqqqrrrr"
	f := func(name string, inserts []string, query string, want int) {
		t.Helper()
		pc := newPrefixCache(4)
		for _, s := range inserts {
			pc.insert(textBlocks([]byte(s), 1))
		}
		if got := pc.match(textBlocks([]byte(query), 1), 100); got != want {
			t.Errorf("%s: got %d blocks matched; want %d", name, got, want)
		}
		if pc.len() > 4 {
			t.Errorf("%s: the cache holds %d blocks; want at most its capacity, 4", name, pc.len())
		}
	}
	f("empty", nil, a, 0)
	f("whole prompt", []string{a}, a, 3)
	f("shared prefix", []string{a}, "aaaabbbbdddd", 2)
	f("longer prompt", []string{a}, a+"dddd", 3)
	f("partial last block", []string{a}, "aaaabbbbcc", 2)
	// Chained blocks: the same later tokens after a changed first block miss.
	f("changed first block", []string{a}, "Aaaabbbbcccc", 0)
	f("changed middle block", []string{a}, "aaaaBbbbcccc", 1)
	// Over capacity, the least recent blocks go, a prompt's end before its
	// beginning: b's three blocks push out c and b of a.
	f("evicted tail", []string{a, b}, a, 1)
	f("recent kept", []string{a, b}, b, 3)
	// Using a again makes it recent: b is the one to lose its end.
	f("refreshed", []string{a, b, a}, a, 3)
	f("refreshed evicts other", []string{a, b, a}, b, 1)
	f("third prompt", []string{a, b, a, c}, a, 1)
}

// A match is bounded by its limit, and does not change recency.
func TestPrefixCacheMatchIsALook(t *testing.T) {
	t.Parallel()
	pc := newPrefixCache(3)
	x, y := textBlocks([]byte("aaaabbbb"), 1), textBlocks([]byte("cccc"), 1)
	pc.insert(x)
	pc.insert(y) // x's second block is now the least recent
	if got := pc.match(x, 1); got != 1 {
		t.Errorf("got %d blocks with limit 1; want 1", got)
	}
	pc.match(x, 2) // looking does not save it
	pc.insert(textBlocks([]byte("dddd"), 1))
	if got := pc.match(x, 2); got != 1 {
		t.Errorf("got %d blocks of the first prompt after an eviction; want 1 (its end evicted)", got)
	}
	pc.flush()
	if got := pc.match(y, 1); got != 0 || pc.len() != 0 {
		t.Errorf("got %d blocks matched and %d cached after flush; want none", got, pc.len())
	}
}

// Blocks cover whole pages only, and token ids and text hash the same way
// every time.
func TestBlocks(t *testing.T) {
	t.Parallel()
	f := func(name string, got []uint64, want int) {
		t.Helper()
		if len(got) != want {
			t.Errorf("%s: got %d blocks; want %d", name, len(got), want)
		}
	}
	f("text, page 1", textBlocks([]byte("12345678901"), 1), 2)
	f("text, page 2", textBlocks([]byte(strings.Repeat("x", 15)), 2), 1)
	f("text, page 2 exact", textBlocks([]byte(strings.Repeat("x", 16)), 2), 2)
	ids := fastjson.MustParse(`[1,2,3,4,5]`)
	f("ids, page 2", idBlocks(ids, 2), 2)
	chat := fastjson.MustParse(`[{"role":"system","content":"aaaa"},{"role":"user","content":[{"type":"text","text":"bb"},{"type":"text","text":"bb"}]}]`)
	got, want := chatBlocks(chat, 1), textBlocks([]byte("aaaabbbb"), 1)
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got chat blocks %x; want those of its text in order, %x", got, want)
	}
	if a, b := idBlocks(fastjson.MustParse(`[1,2]`), 1), idBlocks(fastjson.MustParse(`[1,3]`), 1); a[0] != b[0] || a[1] == b[1] {
		t.Errorf("got id blocks %x and %x; want the first equal and the second different", a, b)
	}
}
