package bootstrap

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"pdlb/bench/fake"
)

func TestClientInfoAndRanks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool
	}{
		{name: "current API", legacy: false},
		{name: "legacy API", legacy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := fake.NewNetwork()
			p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4, OldBootstrapAPI: tc.legacy})
			c := NewClient(prefillBoot, nw.Dial, time.Second)
			defer c.CloseIdleConnections()

			info, err := c.Info(testContext(t))
			if err != nil {
				t.Fatalf("cannot fetch info: %v", err)
			}
			if want := fakeInfo(4, tc.legacy); info != want {
				t.Errorf("got info %+v; want %+v", info, want)
			}
			ranks, err := c.Ranks(testContext(t), info)
			if err != nil {
				t.Fatalf("cannot fetch ranks: %v", err)
			}
			if want := fakeRanks("prefill-0", 8998, 4); !slices.Equal(ranks, want) {
				t.Errorf("got ranks %+v; want %+v", ranks, want)
			}

			// The client remembers the version: one query per Info.
			before := p.Stats().BootstrapRoute
			if _, err := c.Info(testContext(t)); err != nil {
				t.Fatalf("cannot fetch info again: %v", err)
			}
			if got := p.Stats().BootstrapRoute - before; got != 1 {
				t.Errorf("got %d /route queries for a second Info; want 1", got)
			}
		})
	}
}

func TestClientNotRegistered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		legacy  bool
		wantMsg string
	}{
		{name: "current API answers 503", legacy: false, wantMsg: "prefill server not fully registered yet (0 workers registered)"},
		{name: "legacy API answers nulls", legacy: true, wantMsg: "prefill server not fully registered yet: prefill_dp_size is null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := fake.NewNetwork()
			clk := newClock()
			startPrefill(t, nw, prefillAPI, fake.Config{
				DPSize: 2, RegisterDelay: time.Minute, OldBootstrapAPI: tc.legacy, Now: clk.Now,
			})
			c := NewClient(prefillBoot, nw.Dial, time.Second)
			defer c.CloseIdleConnections()

			_, err := c.Info(testContext(t))
			if !errors.Is(err, ErrNotRegistered) {
				t.Fatalf("got error %v; want one wrapping ErrNotRegistered", err)
			}
			if got := err.Error(); !strings.Contains(got, tc.wantMsg) || !strings.Contains(got, prefillBoot) {
				t.Errorf("got error %q; want it to name %s and contain %q", got, prefillBoot, tc.wantMsg)
			}

			clk.Add(time.Minute)
			info, err := c.Info(testContext(t))
			if err != nil {
				t.Fatalf("cannot fetch info once registered: %v", err)
			}
			if want := fakeInfo(2, tc.legacy); info != want {
				t.Errorf("got info %+v; want %+v", info, want)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	nw := fake.NewNetwork()
	p := startPrefill(t, nw, prefillAPI, fake.Config{DPSize: 4})

	f := func(name, addr string, info Info, wantErr string) {
		t.Helper()
		c := NewClient(addr, nw.Dial, time.Second)
		defer c.CloseIdleConnections()
		var err error
		if info == (Info{}) {
			_, err = c.Info(testContext(t))
		} else {
			_, err = c.Ranks(testContext(t), info)
		}
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: got error %v; want one containing %q", name, err, wantErr)
		}
	}

	f("unreachable", "nowhere:8998", Info{},
		"cannot fetch parallel info from bootstrap server nowhere:8998: ")
	f("rank missing", prefillBoot, Info{DPSize: 5, AttnTPSize: 1, AttnCPSize: 1, PPSize: 1},
		`cannot fetch the address of rank dp=4 cp=0 tp=0 pp=0 from bootstrap server prefill-0:8998: answered 404 "Bootstrap info not found`)

	before := p.Stats().BootstrapRoute
	f("too many ranks", prefillBoot, Info{DPSize: 64, AttnTPSize: 8, AttnCPSize: 1, PPSize: 9},
		"dp_size 64 × attn_cp_size 1 × attn_tp_size 8 × pp_size 9 ranks exceed the limit of 4096")
	f("bad sizes", prefillBoot, Info{DPSize: 1, AttnTPSize: 0, AttnCPSize: 1, PPSize: 1},
		"every size must be at least 1")
	if got := p.Stats().BootstrapRoute - before; got != 0 {
		t.Errorf("got %d /route queries for refused rank counts; want 0", got)
	}
}

func TestRankAt(t *testing.T) {
	info := Info{DPSize: 2, AttnCPSize: 2, AttnTPSize: 3, PPSize: 2}
	var got []Rank
	for i := range 2 * 2 * 3 * 2 {
		got = append(got, rankAt(info, i))
	}
	var want []Rank
	for dp := range 2 {
		for cp := range 2 {
			for tp := range 3 {
				for pp := range 2 {
					want = append(want, Rank{DPRank: dp, CPRank: cp, TPRank: tp, PPRank: pp})
				}
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v; want %v", got, want)
	}
}

func TestRankQuery(t *testing.T) {
	f := func(legacy bool, r Rank, want string) {
		t.Helper()
		if got := rankQuery(legacy, &r); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f(false, Rank{DPRank: 3, CPRank: 1, TPRank: 2, PPRank: 4},
		"/route?prefill_dp_rank=3&prefill_cp_rank=1&target_tp_rank=2&target_pp_rank=4")
	f(true, Rank{DPRank: 3, TPRank: 2, PPRank: 4},
		"/route?engine_rank=2&target_dp_group=3&target_pp_rank=4")
}

func TestNotRegisteredError(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		err := notRegistered([]byte(body))
		if !errors.Is(err, ErrNotRegistered) {
			t.Errorf("got %v; want an error wrapping ErrNotRegistered", err)
		}
		if got := err.Error(); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f("Prefill server not fully registered yet (3 workers registered).",
		"prefill server not fully registered yet (3 workers registered)")
	f("Service Unavailable",
		`prefill server not fully registered yet: answered 503 "Service Unavailable"`)
	f("Prefill server not fully registered yet (many workers registered).",
		`prefill server not fully registered yet: answered 503 "Prefill server not fully registered yet (many workers registered)."`)
}
