package load

import (
	"errors"
	"testing"
)

func TestSnapshotLoad(t *testing.T) {
	rank := func(dp int, reqs, total int64) Rank {
		return Rank{DPRank: dp, Reqs: reqs, TotalTokens: total}
	}
	f := func(name string, s *Snapshot, wantLoad int64, wantOK bool, wantTokens int64, wantTokensOK bool) {
		t.Helper()
		if got, ok := s.Load(); got != wantLoad || ok != wantOK {
			t.Errorf("%s: Load got (%d, %t); want (%d, %t)", name, got, ok, wantLoad, wantOK)
		}
		if got, ok := s.Tokens(); got != wantTokens || ok != wantTokensOK {
			t.Errorf("%s: Tokens got (%d, %t); want (%d, %t)", name, got, ok, wantTokens, wantTokensOK)
		}
	}
	f("nil", nil, 0, false, 0, false)
	f("not polled", &Snapshot{Err: errNotPolled}, 0, false, 0, false)
	f("one rank", &Snapshot{Ranks: []Rank{rank(0, 5, 100)}}, 5, true, 100, true)
	f("summed over ranks", &Snapshot{Ranks: []Rank{rank(0, 5, 100), rank(1, 2, 50)}}, 7, true, 150, true)
	f("all idle", &Snapshot{Ranks: []Rank{rank(0, 0, 0)}}, 0, true, 0, true)
	// One rank that did not say makes the whole worker unknown: a partial
	// sum would make it look lighter than it is.
	f("a rank unknown", &Snapshot{Ranks: []Rank{rank(0, 5, Unknown), rank(1, Unknown, 50)}}, 0, false, 0, false)
	f("failed poll", &Snapshot{Ranks: []Rank{rank(0, 5, 1)}, Err: errors.New("x")}, 0, false, 0, false)
}

func TestSnapshotRank(t *testing.T) {
	s := &Snapshot{Ranks: []Rank{{DPRank: 0, Reqs: 3}, {DPRank: 2, Reqs: Unknown}, {DPRank: 5, Reqs: 9}}}
	f := func(s *Snapshot, dp int, wantLoad int64, wantOK bool) {
		t.Helper()
		if got, ok := s.RankLoad(dp); got != wantLoad || ok != wantOK {
			t.Errorf("RankLoad(%d) got (%d, %t); want (%d, %t)", dp, got, ok, wantLoad, wantOK)
		}
	}
	f(s, 0, 3, true)
	f(s, 2, 0, false) // reported, but without its count
	f(s, 5, 9, true)  // found past its position
	f(s, 1, 0, false)
	f(s, -1, 0, false)
	f(s, 6, 0, false)
	f(nil, 0, 0, false)
}

func TestRouteString(t *testing.T) {
	f := func(r Route, want string) {
		t.Helper()
		if got := r.String(); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f(RouteNone, "none")
	f(RouteLoads, "/v1/loads")
	f(RouteGetLoad, "/get_load")
}

// Others is the load less the caller's own requests then, never below 0.
func TestSnapshotOthers(t *testing.T) {
	f := func(name string, s *Snapshot, want int64, wantOK bool) {
		t.Helper()
		if got, ok := s.Others(); got != want || ok != wantOK {
			t.Errorf("%s: Others got (%d, %t); want (%d, %t)", name, got, ok, want, wantOK)
		}
	}
	f("nil", nil, 0, false)
	f("no own count", &Snapshot{Ranks: []Rank{{Reqs: 5}}}, 5, true)
	f("some own", &Snapshot{Ranks: []Rank{{Reqs: 5}}, Own: 3}, 2, true)
	f("only own", &Snapshot{Ranks: []Rank{{Reqs: 3}}, Own: 3}, 0, true)
	// Own is read as the answer arrives: requests sent since then may
	// make it larger than what the worker counted.
	f("own ahead of the report", &Snapshot{Ranks: []Rank{{Reqs: 1}}, Own: 4}, 0, true)
	f("unknown", &Snapshot{Ranks: []Rank{{Reqs: Unknown}}, Own: 1}, 0, false)
	two := &Snapshot{Ranks: []Rank{{DPRank: 0, Reqs: 5, Own: 1}, {DPRank: 1, Reqs: 2, Own: 4}}}
	for dp, want := range []int64{4, 0} {
		if got, ok := two.RankOthers(dp); !ok || got != want {
			t.Errorf("RankOthers(%d) got (%d, %t); want (%d, true)", dp, got, ok, want)
		}
	}
}
