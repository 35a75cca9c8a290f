package policy

import (
	"fmt"
	"strings"
	"testing"
)

func workerNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("http://10.0.0.%d:30000", i+1)
	}
	return names
}

func testKey(i int) []byte {
	return []byte(fmt.Sprintf("session-%d", i))
}

// Two rings built from the same workers in different orders send every key
// to the same worker name: pdlb replicas agree.
func TestRingDeterministicAcrossOrders(t *testing.T) {
	names := workerNames(5)
	reversed := []string{names[4], names[3], names[2], names[1], names[0]}
	a, b := NewRing(names), NewRing(reversed)
	loads := make([]int, 5)
	for i := range 2000 {
		wa := ConsistentHash(a, "", testKey(i), Pool{Loads: loads}).Worker
		wb := ConsistentHash(b, "", testKey(i), Pool{Loads: loads}).Worker
		if names[wa] != reversed[wb] {
			t.Fatalf("key %d: %s on one ring, %s on the other", i, names[wa], reversed[wb])
		}
	}
}

// Adding a fifth worker moves about 1/5 of the keys, all of them to it;
// an even spread would be 20 % each.
func TestRingStability(t *testing.T) {
	before, after := NewRing(workerNames(4)), NewRing(workerNames(5))
	const keys = 10000
	moved, perWorker := 0, make([]int, 5)
	for i := range keys {
		wb := ConsistentHash(before, "", testKey(i), Pool{Loads: make([]int, 4)}).Worker
		wa := ConsistentHash(after, "", testKey(i), Pool{Loads: make([]int, 5)}).Worker
		perWorker[wa]++
		if wa != wb {
			moved++
			if wa != 4 {
				t.Fatalf("key %d moved from worker %d to %d, not to the new one", i, wb, wa)
			}
		}
	}
	if share := float64(moved) / keys; share < 0.15 || share > 0.25 {
		t.Errorf("%.3f of keys moved; want about 0.2", share)
	}
	for w, n := range perWorker {
		if share := float64(n) / keys; share < 0.15 || share > 0.25 {
			t.Errorf("worker %d got %.3f of keys; want about 0.2", w, share)
		}
	}
}

// An unusable owner hands its keys to the next worker on the ring, the
// same one every time; the others keep theirs.
func TestRingSkipsUnusable(t *testing.T) {
	r := NewRing(workerNames(4))
	all := Pool{Loads: make([]int, 4)}
	down := Pool{Loads: make([]int, 4), Usable: []bool{true, false, true, true}}
	for i := range 1000 {
		wa := ConsistentHash(r, "", testKey(i), all).Worker
		wd := ConsistentHash(r, "", testKey(i), down).Worker
		if wd == 1 || (wa != 1 && wd != wa) {
			t.Fatalf("key %d: worker %d with all up, %d with worker 1 down", i, wa, wd)
		}
		if again := ConsistentHash(r, "", testKey(i), down).Worker; again != wd {
			t.Fatalf("key %d: %d then %d", i, wd, again)
		}
	}
}

func TestPrefixHashBoundedLoad(t *testing.T) {
	ph := DefaultPrefixHash()
	r := NewRing(workerNames(4))
	key := []byte(strings.Repeat("system prompt ", 100))
	// The key's owner and the next two workers after it on the ring.
	var order []int
	r.walk(Hash(ph.PrefixBytes(key)), func(w int) bool { order = append(order, w); return false })
	loadsWith := func(high ...int) []int {
		l := []int{4, 4, 4, 4}
		for _, w := range high {
			l[w] = 12
		}
		return l
	}
	for _, tc := range []struct {
		name   string
		loads  []int
		usable []bool
		want   int
		reason Reason
	}{
		{"idle pool: owner", []int{0, 0, 0, 0}, nil, order[0], ReasonHash},
		{"owner within bound", loadsWith(order[1]), nil, order[0], ReasonHash},
		// 4+4+4+12 = 24: bound 1.25 × 25/4 = 7.8
		{"owner over bound: next on ring", loadsWith(order[0]), nil, order[1], ReasonHashOverload},
		// 4+4+12+12 = 32: bound 1.25 × 33/4 = 10.3
		{"owner and next over bound: third", loadsWith(order[0], order[1]), nil, order[2], ReasonHashOverload},
		{"owner not usable: next", []int{0, 0, 0, 0}, func() []bool {
			u := []bool{true, true, true, true}
			u[order[0]] = false
			return u
		}(), order[1], ReasonHash},
		{"none usable", []int{0, 0, 0, 0}, []bool{false, false, false, false}, -1, ReasonNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ph.Pick(r, key, Pool{Loads: tc.loads, Usable: tc.usable})
			if got.Worker != tc.want || got.Reason != tc.reason {
				t.Fatalf("got worker %d (%s); want %d (%s)", got.Worker, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

// Only the first Tokens×4 bytes count: prompts that differ after them go
// to the same worker, and an empty prompt to the least loaded.
func TestPrefixHashPrefix(t *testing.T) {
	ph := PrefixHash{Tokens: 4, LoadFactor: 1.25}
	r := NewRing(workerNames(8))
	p := Pool{Loads: make([]int, 8)}
	same := 0
	for i := range 200 {
		a := ph.Pick(r, []byte(fmt.Sprintf("%016d tail a", i)), p).Worker
		b := ph.Pick(r, []byte(fmt.Sprintf("%016d tail b", i)), p).Worker
		c := ph.Pick(r, []byte(fmt.Sprintf("%015dx tail", i)), p).Worker
		if a != b {
			t.Fatalf("prompt %d: tails after the prefix changed the worker (%d, %d)", i, a, b)
		}
		if a == c {
			same++
		}
	}
	if same > 60 { // 1/8 expected by chance
		t.Errorf("%d of 200 prompts that differ inside the prefix stayed on their worker", same)
	}
	if got := ph.Pick(r, nil, Pool{Loads: []int{3, 2, 1, 5, 5, 5, 5, 5}}); got.Worker != 2 || got.Reason != ReasonNoKey {
		t.Errorf("empty prompt: got worker %d (%s); want 2 (no_key)", got.Worker, got.Reason)
	}
}

func TestConsistentHashTarget(t *testing.T) {
	r := NewRing(workerNames(3))
	for _, tc := range []struct {
		target string
		usable []bool
		want   int
	}{
		{"2", nil, 2},
		{"0", nil, 0},
		{"3", nil, -1},
		{"-1", nil, -1},
		{"one", nil, -1},
		{"1", []bool{true, false, true}, -1},
	} {
		got := ConsistentHash(r, tc.target, []byte("key ignored"), Pool{Loads: make([]int, 3), Usable: tc.usable})
		if got.Worker != tc.want || got.Reason != ReasonTargetWorker {
			t.Errorf("target %q: got worker %d (%s); want %d (target_worker)", tc.target, got.Worker, got.Reason, tc.want)
		}
	}
}

func TestConsistentHashNoKey(t *testing.T) {
	r := NewRing(workerNames(3))
	seen := map[int]bool{}
	for range 200 {
		got := ConsistentHash(r, "", nil, Pool{Loads: make([]int, 3), Usable: []bool{true, false, true}})
		if got.Reason != ReasonNoKey || got.Worker == 1 || got.Worker < 0 {
			t.Fatalf("got worker %d (%s); want 0 or 2 (no_key)", got.Worker, got.Reason)
		}
		seen[got.Worker] = true
	}
	if len(seen) != 2 {
		t.Errorf("random fallback used workers %v; want both usable ones", seen)
	}
	if got := ConsistentHash(r, "", nil, Pool{Loads: make([]int, 3), Usable: make([]bool, 3)}); got != none {
		t.Errorf("nothing usable: got %+v; want %+v", got, none)
	}
}

// A ring with empty slots ("" names) sends every key to the worker the ring
// of its workers alone sends it to: a pool whose worker left keeps its
// slot empty, and must route as a replica that never had the worker does
// (issue 23).
func TestRingEmptySlots(t *testing.T) {
	names := workerNames(300) // beyond the walk's stack bitmap
	holed := append([]string(nil), names...)
	var compact []string
	for i := range holed {
		if i%3 == 1 {
			holed[i] = ""
		} else {
			compact = append(compact, names[i])
		}
	}
	a, b := NewRing(holed), NewRing(compact)
	if a.Len() != len(compact) {
		t.Fatalf("Len: got %d; want %d", a.Len(), len(compact))
	}
	usable := make([]bool, len(holed))
	for i, n := range holed {
		usable[i] = n != ""
	}
	for i := range 2000 {
		wa := ConsistentHash(a, "", testKey(i), Pool{Loads: make([]int, len(holed)), Usable: usable}).Worker
		wb := ConsistentHash(b, "", testKey(i), Pool{Loads: make([]int, len(compact))}).Worker
		if holed[wa] != compact[wb] {
			t.Fatalf("key %d: %q on the ring with holes, %q on the compact one", i, holed[wa], compact[wb])
		}
	}
}
