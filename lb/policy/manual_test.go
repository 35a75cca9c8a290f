package policy

import (
	"strconv"
	"testing"
	"time"
)

func newManual(t *testing.T, mode string, names []string) *Manual {
	t.Helper()
	m, err := NewManual(ManualConfig{MaxIdle: time.Hour, Assignment: mode})
	if err != nil {
		t.Fatal(err)
	}
	m.SetWorkers(names)
	return m
}

func TestManualSticks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newManual(t, AssignRandom, []string{"a", "b", "c"})
	all := Pool{Loads: []int{0, 0, 0}}
	first := m.Pick("user-1", t0, all)
	if first.Reason != ReasonNewKey {
		t.Fatalf("first pick: got %s; want new_key", first.Reason)
	}
	for range 20 {
		if got := m.Pick("user-1", t0, all); got.Worker != first.Worker || got.Reason != ReasonStickyHit {
			t.Fatalf("got worker %d (%s); want %d (sticky_hit)", got.Worker, got.Reason, first.Worker)
		}
	}
	// Its worker goes down: the key moves, and stays moved.
	down := Pool{Loads: []int{0, 0, 0}, Usable: []bool{true, true, true}}
	down.Usable[first.Worker] = false
	moved := m.Pick("user-1", t0, down)
	if moved.Worker == first.Worker || moved.Reason != ReasonStickyMoved {
		t.Fatalf("worker down: got worker %d (%s); want another (sticky_moved)", moved.Worker, moved.Reason)
	}
	if got := m.Pick("user-1", t0, down); got.Worker != moved.Worker || got.Reason != ReasonStickyHit {
		t.Fatalf("after the move: got worker %d (%s); want %d (sticky_hit)", got.Worker, got.Reason, moved.Worker)
	}
	// It comes back: the key returns to it, its first worker.
	if got := m.Pick("user-1", t0, all); got.Worker != first.Worker || got.Reason != ReasonStickyHit {
		t.Fatalf("worker back: got worker %d (%s); want %d (sticky_hit)", got.Worker, got.Reason, first.Worker)
	}
	// The pool is renumbered and grows: the key follows its worker's name.
	m.SetWorkers([]string{"d", "c", "b", "a"})
	want := 3 - first.Worker
	if got := m.Pick("user-1", t0, Pool{Loads: make([]int, 4)}); got.Worker != want {
		t.Fatalf("renumbered: got worker %d; want %d", got.Worker, want)
	}
}

func TestManualAssignment(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		loads []int
		want  int
	}{
		{AssignMinLoad, []int{3, 1, 2}, 1},
		{AssignMinLoad, []int{0, 5, 5}, 0},
		// Worker 0 already has two keys, worker 1 one; 2 has none.
		{AssignMinGroup, []int{0, 0, 9}, 2},
	} {
		m := newManual(t, tc.mode, []string{"a", "b", "c"})
		for _, k := range []struct {
			key string
			w   int
		}{{"k1", 0}, {"k2", 0}, {"k3", 1}} {
			m.Pick(k.key, time.Time{}, Pool{Loads: make([]int, 3), Usable: only(3, k.w)})
		}
		if got := m.Pick("new", time.Time{}, Pool{Loads: tc.loads}); got.Worker != tc.want || got.Reason != ReasonNewKey {
			t.Errorf("%s %v: got worker %d (%s); want %d (new_key)", tc.mode, tc.loads, got.Worker, got.Reason, tc.want)
		}
	}
	if _, err := NewManual(ManualConfig{Assignment: "round_robin"}); err == nil {
		t.Errorf("unknown assignment mode accepted")
	}
}

func TestManualNoKey(t *testing.T) {
	m := newManual(t, AssignMinLoad, []string{"a", "b"})
	if got := m.Pick("", time.Time{}, Pool{Loads: []int{2, 1}}); got.Worker != 1 || got.Reason != ReasonNoKey {
		t.Fatalf("got worker %d (%s); want 1 (no_key)", got.Worker, got.Reason)
	}
	if n := m.Evict(time.Time{}); n != 0 {
		t.Fatalf("a request without a key left %d keys; want 0", n)
	}
	if got := m.Pick("k", time.Time{}, Pool{Loads: []int{0, 0}, Usable: []bool{false, false}}); got != none {
		t.Fatalf("nothing usable: got %+v; want %+v", got, none)
	}
}

func TestManualEvict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newManual(t, AssignMinGroup, []string{"a", "b"})
	p := Pool{Loads: []int{0, 0}}
	m.Pick("old", t0, Pool{Loads: []int{0, 0}, Usable: only(2, 0)})
	m.Pick("fresh", t0.Add(30*time.Minute), Pool{Loads: []int{0, 0}, Usable: only(2, 1)})
	if n := m.Evict(t0.Add(time.Hour - time.Second)); n != 2 {
		t.Fatalf("before MaxIdle: %d keys; want 2", n)
	}
	if n := m.Evict(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("at MaxIdle: %d keys; want 1", n)
	}
	// "old" is forgotten, so worker a has no key left: min_group gives a
	// new key to it.
	if got := m.Pick("another", t0, p); got.Worker != 0 {
		t.Fatalf("after eviction: got worker %d; want 0 (fewest keys)", got.Worker)
	}
	if got := m.Pick("old", t0, p); got.Reason != ReasonNewKey {
		t.Fatalf("evicted key: got %s; want new_key", got.Reason)
	}
}

// Keys come from clients: beyond MaxManualKeys a new key is placed but not
// remembered, until Evict makes room.
func TestManualKeysAreBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newManual(t, AssignRandom, []string{"a", "b"})
	all := Pool{Loads: []int{0, 0}}
	for i := range MaxManualKeys + 10 {
		if ch := m.Pick("key-"+strconv.Itoa(i), t0, all); ch.Worker < 0 {
			t.Fatalf("key %d was not placed", i)
		}
	}
	if n := len(m.keys); n != MaxManualKeys {
		t.Fatalf("%d keys remembered; want at most %d", n, MaxManualKeys)
	}
	if ch := m.Pick("key-"+strconv.Itoa(MaxManualKeys+5), t0, all); ch.Reason != ReasonNewKey {
		t.Fatalf("a key beyond the bound was remembered: %s", ch.Reason)
	}
	m.Evict(t0.Add(2 * time.Hour))
	m.Pick("late", t0.Add(2*time.Hour), all)
	if ch := m.Pick("late", t0.Add(2*time.Hour), all); ch.Reason != ReasonStickyHit {
		t.Fatalf("after Evict, a new key was not remembered: %s", ch.Reason)
	}
}
