package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

const (
	loadsURI   = "/v1/loads?include=core"
	getLoadURI = "/get_load"
)

// pollCase is a worker's answers and what one round must make of them.
type pollCase struct {
	name          string
	loads, getLd  *answer
	auth          string
	wantRoute     Route
	wantLoad      int64 // when wantLoadOK
	wantLoadOK    bool
	wantKnown     bool
	wantErr       string // prefix; "" for none
	wantHits      []string
	wantAuthHeard string
}

// check compares the snapshot of c's worker after a round started at
// start, and the requests its fake f received, with c's wants.
func (c *pollCase) check(t *testing.T, s *Snapshot, start time.Time, f *fake) {
	t.Helper()
	errText := ""
	if s.Err != nil {
		errText = s.Err.Error()
	}
	load, loadOK := s.Load()
	switch {
	case s.Route != c.wantRoute:
		t.Errorf("%s: route got %s; want %s", c.name, s.Route, c.wantRoute)
	case s.Known() != c.wantKnown:
		t.Errorf("%s: Known got %t; want %t (err %v)", c.name, s.Known(), c.wantKnown, s.Err)
	case loadOK != c.wantLoadOK || load != c.wantLoad:
		t.Errorf("%s: Load got (%d, %t); want (%d, %t)", c.name, load, loadOK, c.wantLoad, c.wantLoadOK)
	case c.wantErr == "" && s.Err != nil, !strings.HasPrefix(errText, c.wantErr):
		t.Errorf("%s: err got %q; want %q...", c.name, errText, c.wantErr)
	case !s.At.Equal(start) || !s.Since.Equal(start):
		t.Errorf("%s: At, Since got %v, %v; want the round's time %v", c.name, s.At, s.Since, start)
	}
	var heard string
	var got []string
	for len(f.hits) > 0 {
		h := <-f.hits
		got, heard = append(got, h.uri), h.auth
	}
	if !slices.Equal(got, c.wantHits) {
		t.Errorf("%s: requests got %q; want %q", c.name, got, c.wantHits)
	}
	if heard != c.wantAuthHeard {
		t.Errorf("%s: Authorization got %q; want %q", c.name, heard, c.wantAuthHeard)
	}
}

// One round against workers of every kind: each ends with the snapshot
// its answers call for, having been asked exactly the routes it should.
func TestPollOnce(t *testing.T) {
	twoRanks := loadsAnswer(loadsEntry(1, 4, 1, 10, 20), loadsEntry(0, 2, 0, 30, 40))
	cases := []pollCase{
		{name: "current SGLang", loads: ok(twoRanks),
			wantRoute: RouteLoads, wantLoad: 7, wantLoadOK: true, wantKnown: true,
			wantHits: []string{loadsURI}},
		{name: "older SGLang: /v1/loads is 404", getLd: ok(`[{"dp_rank":0,"num_reqs":6,"num_waiting_reqs":1,"num_tokens":99}]`),
			wantRoute: RouteGetLoad, wantLoad: 6, wantLoadOK: true, wantKnown: true,
			wantHits: []string{loadsURI, getLoadURI}},
		{name: "neither route",
			wantRoute: RouteGetLoad, wantErr: errNoRoute.Error(),
			wantHits: []string{loadsURI, getLoadURI}},
		// A failure other than 404 says nothing of which route the worker
		// has: no fallback.
		{name: "server error", loads: &answer{status: 500, body: "boom"}, getLd: ok(`[{"num_reqs":1}]`),
			wantRoute: RouteLoads, wantErr: "GET /v1/loads returned status 500; want 200",
			wantHits: []string{loadsURI}},
		{name: "garbage", loads: ok(`<html>oops</html>`),
			wantRoute: RouteLoads, wantErr: "cannot parse /v1/loads answer: ",
			wantHits: []string{loadsURI}},
		{name: "the aggregate shape of before #28634", loads: ok(`{"aggregate":{"total_tokens":5}}`),
			wantRoute: RouteLoads, wantErr: "/v1/loads answer has no loads array",
			wantHits: []string{loadsURI}},
		// Every count -1: the worker answered, but its load is unknown, so
		// the caller counts its own requests in flight instead.
		{name: "every count -1", loads: ok(loadsAnswer(`{"dp_rank":0,"num_running_reqs":-1,"num_waiting_reqs":-1}`)),
			wantRoute: RouteLoads, wantKnown: true,
			wantHits: []string{loadsURI}},
		{name: "API key", loads: ok(twoRanks), auth: "Bearer sk-1",
			wantRoute: RouteLoads, wantLoad: 7, wantLoadOK: true, wantKnown: true,
			wantHits: []string{loadsURI}, wantAuthHeard: "Bearer sk-1"},
	}
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		fakes := make([]*fake, len(cases))
		targets := []Target{{Addr: "nowhere:30000"}}
		for i, c := range cases {
			addr := fmt.Sprintf("worker%d:30000", i)
			fakes[i] = nw.serve(t, addr, c.loads, c.getLd)
			targets = append(targets, Target{Addr: addr, Authorization: c.auth})
		}
		p := newPoller(t, nw, Config{Targets: targets})
		start := time.Now()
		p.PollOnce(context.Background())
		for i := range cases {
			cases[i].check(t, p.Get(fmt.Sprintf("worker%d:30000", i)), start, fakes[i])
		}
		if s := p.Get("nowhere:30000"); s.Known() || s.Err == nil || !strings.Contains(s.Err.Error(), "connection refused") {
			t.Errorf("unreachable worker: got known %t, err %v; want unknown, connection refused", s.Known(), s.Err)
		}
	})
}

// A worker found only on /get_load is read there, and asked /v1/loads
// again once Recheck has passed; once it answers there, it stays there.
// Rounds come every Interval on the bubble's clock, with no wait.
func TestRecheckAfterUpgrade(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		f := nw.serve(t, "w:1", nil, ok(`[{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":0,"num_tokens":1}]`))
		p := newPoller(t, nw, Config{Targets: []Target{{Addr: "w:1"}}, Interval: time.Second, Recheck: 2500 * time.Millisecond})
		stop := make(chan struct{})
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			p.Run(stop)
		}()
		var got []string
		for len(got) < 12 {
			h := <-f.hits
			got = append(got, fmt.Sprintf("%v %s", h.at.Sub(start), h.uri))
			if h.at.Sub(start) == 4*time.Second {
				f.loads.Store(ok(loadsAnswer(loadsEntry(0, 1, 0, 1, 1)))) // upgraded
			}
		}
		close(stop)
		<-done
		want := []string{
			"0s /v1/loads?include=core", "0s /get_load",
			"1s /get_load", "2s /get_load",
			"3s /v1/loads?include=core", "3s /get_load", // 3 s ≥ Recheck: ask again
			"4s /get_load", "5s /get_load",
			"6s /v1/loads?include=core", // upgraded meanwhile: 200
			"7s /v1/loads?include=core", "8s /v1/loads?include=core", "9s /v1/loads?include=core",
		}
		if !slices.Equal(got, want) {
			t.Errorf("requests got\n%q\nwant\n%q", got, want)
		}
		if s := p.Get("w:1"); s.Route != RouteLoads || !s.Known() {
			t.Errorf("after the upgrade: route %s, known %t; want %s, true", s.Route, s.Known(), RouteLoads)
		}
	})
}

// A slow worker costs the round Timeout, no more, and only its own load;
// a round cut short by its context drops what it had not finished.
func TestSlowWorker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		nw.serve(t, "fast:1", ok(loadsAnswer(loadsEntry(0, 1, 2, 3, 4))), nil)
		slow := nw.serve(t, "slow:1", &answer{hang: true}, nil)
		p := newPoller(t, nw, Config{Targets: []Target{{Addr: "fast:1"}, {Addr: "slow:1"}}, Timeout: 2 * time.Second})

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		p.PollOnce(ctx)
		cancel()
		if took := time.Since(start); took != 500*time.Millisecond {
			t.Errorf("round cut by its context took %v; want 500ms", took)
		}
		if s := p.Get("slow:1"); !errors.Is(s.Err, errNotPolled) {
			t.Errorf("slow worker after a cut round: err %v; want %v (result dropped)", s.Err, errNotPolled)
		}
		if !p.Get("fast:1").Known() {
			t.Errorf("fast worker unknown after a cut round")
		}

		start = time.Now()
		p.PollOnce(context.Background())
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("round took %v; want Timeout, 2s", took)
		}
		s := p.Get("slow:1")
		if s.Known() || s.Err == nil || !strings.Contains(s.Err.Error(), "timeout") {
			t.Errorf("slow worker: known %t, err %v; want unknown, a timeout", s.Known(), s.Err)
		}
		if !s.At.Equal(start.Add(2 * time.Second)) {
			t.Errorf("slow worker: At %v; want %v", s.At, start.Add(2*time.Second))
		}
		if load, ok := p.Get("fast:1").Load(); !ok || load != 3 {
			t.Errorf("fast worker: Load got (%d, %t); want (3, true)", load, ok)
		}
		if n := len(slow.hits); n != 2 {
			t.Errorf("slow worker asked %d times; want 2, one per round", n)
		}
	})
}

// A worker that goes away has no load from the first failed poll, with why
// and since when; when it comes back, its load is known again.
func TestWorkerGoesAwayAndComesBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		body := loadsAnswer(loadsEntry(0, 5, 0, 1, 1))
		nw.serve(t, "w:1", ok(body), nil)
		p := newPoller(t, nw, Config{Targets: []Target{{Addr: "w:1"}}})
		start := time.Now()
		type want struct {
			known bool
			since time.Duration
			err   string
		}
		step := func(after time.Duration, w want) {
			t.Helper()
			time.Sleep(after - time.Since(start)) // on the bubble's clock
			p.PollOnce(context.Background())
			s := p.Get("w:1")
			errText := ""
			if s.Err != nil {
				errText = s.Err.Error()
			}
			if s.Known() != w.known || s.Since.Sub(start) != w.since || !strings.Contains(errText, w.err) ||
				s.At.Sub(start) != after {
				t.Errorf("at %v: known %t, since %v, at %v, err %q; want %t, %v, %v, %q",
					after, s.Known(), s.Since.Sub(start), s.At.Sub(start), errText, w.known, w.since, after, w.err)
			}
		}
		step(0, want{known: true, since: 0})
		step(time.Second, want{known: true, since: 0})
		nw.down("w:1")
		step(2*time.Second, want{known: false, since: 2 * time.Second, err: "cannot GET /v1/loads"})
		step(3*time.Second, want{known: false, since: 2 * time.Second, err: "connection refused"})
		nw.serve(t, "w:1", ok(body), nil)
		step(4*time.Second, want{known: true, since: 4 * time.Second})
	})
}

// Workers added and removed at run time: Add starts unknown, polled from
// the next round; re-adding the same target changes nothing; Remove stops
// the polls and Get forgets the address.
func TestAddRemove(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		a := nw.serve(t, "a:1", ok(loadsAnswer(loadsEntry(0, 1, 0, 1, 1))), nil)
		nw.serve(t, "b:1", ok(loadsAnswer(loadsEntry(0, 2, 0, 1, 1))), nil)
		p := newPoller(t, nw, Config{})
		if s := p.Get("a:1"); s != nil {
			t.Fatalf("Get of an address never added: got %+v; want nil", s)
		}
		p.Add(Target{Addr: "a:1"})
		if s := p.Get("a:1"); s == nil || s.Known() || !errors.Is(s.Err, errNotPolled) {
			t.Fatalf("just added: got %+v; want unknown, not polled", s)
		}
		p.PollOnce(context.Background())
		polled := p.Get("a:1")
		if load, ok := polled.Load(); !ok || load != 1 {
			t.Fatalf("a:1 Load got (%d, %t); want (1, true)", load, ok)
		}
		p.Add(Target{Addr: "a:1"})
		if p.Get("a:1") != polled {
			t.Errorf("re-adding the same target replaced its snapshot")
		}
		p.Add(Target{Addr: "a:1", Authorization: "Bearer new"})
		if s := p.Get("a:1"); s.Known() {
			t.Errorf("a target whose key changed kept its old load")
		}
		p.Add(Target{Addr: "b:1"})
		p.PollOnce(context.Background())
		var addrs []string
		for _, s := range p.Snapshots() {
			addrs = append(addrs, fmt.Sprintf("%s:%t", s.Addr, s.Known()))
		}
		if got, want := strings.Join(addrs, " "), "a:1:true b:1:true"; got != want {
			t.Errorf("Snapshots got %s; want %s", got, want)
		}
		a.takeHits()
		p.Remove("a:1")
		p.Remove("nothing:1")
		p.PollOnce(context.Background())
		if s := p.Get("a:1"); s != nil {
			t.Errorf("Get after Remove: got %+v; want nil", s)
		}
		if hits := a.takeHits(); len(hits) != 0 {
			t.Errorf("removed worker still asked: %q", hits)
		}
	})
}

// Run stops when told, with a poll hanging: it waits for that poll's
// Timeout at most (a fasthttp request cannot be cancelled), drops its
// result, and leaves no goroutine behind (the bubble checks).
func TestRunStops(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		f := nw.serve(t, "hang:1", &answer{hang: true}, nil)
		p := newPoller(t, nw, Config{Targets: []Target{{Addr: "hang:1"}}, Timeout: 2 * time.Second, Interval: time.Hour})
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Run(stop)
		}()
		<-f.hits
		start := time.Now()
		close(stop)
		<-done
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("Run took %v to stop; want the poll's Timeout, 2s", took)
		}
		if s := p.Get("hang:1"); !errors.Is(s.Err, errNotPolled) {
			t.Errorf("after stop: err %v; want %v (the cut poll dropped)", s.Err, errNotPolled)
		}
	})
}

func TestDefaults(t *testing.T) {
	p := New(Config{Targets: []Target{{Addr: "w:1", TLS: true}}})
	if p.cfg.Interval != time.Second || p.cfg.Timeout != time.Second || p.cfg.Recheck != time.Minute {
		t.Errorf("defaults got interval %v, timeout %v, recheck %v; want 1s, 1s, 1m", p.cfg.Interval, p.cfg.Timeout, p.cfg.Recheck)
	}
	w := (*p.workers.Load())["w:1"]
	if hc := w.hc; hc.MaxConns != 1 || hc.MaxIdemponentCallAttempts != 1 || !hc.IsTLS ||
		hc.ReadTimeout != time.Second || hc.MaxIdleConnDuration >= 5*time.Second {
		t.Errorf("client: MaxConns %d, attempts %d, TLS %t, read timeout %v, idle %v",
			hc.MaxConns, hc.MaxIdemponentCallAttempts, hc.IsTLS, hc.ReadTimeout, hc.MaxIdleConnDuration)
	}
	if w.scheme != "https://" {
		t.Errorf("scheme got %q; want https://", w.scheme)
	}
}

// With Config.Own, each snapshot holds the caller's own count as the
// answer arrived, read for that worker, so that Others leaves it out.
func TestPollRecordsOwnRequests(t *testing.T) {
	bubble(t, func(t *testing.T) {
		nw := newNetwork()
		nw.serve(t, "a:30000", ok(loadsAnswer(loadsEntry(0, 3, 0, 10, 20))), nil)
		nw.serve(t, "b:30000", ok(loadsAnswer(loadsEntry(0, 3, 0, 10, 20))), nil)
		own := map[string]int64{"a:30000": 3, "b:30000": 1}
		p := newPoller(t, nw, Config{Targets: []Target{{Addr: "a:30000"}, {Addr: "b:30000"}},
			Own: func(addr string, rank int) int64 {
				if rank > 0 {
					return 100 // no such rank: never read
				}
				return own[addr] // the one rank is the whole worker
			}})
		p.PollOnce(context.Background())
		for addr, want := range map[string]int64{"a:30000": 0, "b:30000": 2} {
			s := p.Get(addr)
			if others, ok := s.Others(); s.Own != own[addr] || !ok || others != want {
				t.Errorf("%s: Own %d, Others (%d, %t); want %d, (%d, true)", addr, s.Own, others, ok, own[addr], want)
			}
			if others, ok := s.RankOthers(0); !ok || others != want {
				t.Errorf("%s: RankOthers(0) (%d, %t); want (%d, true)", addr, others, ok, want)
			}
		}
	})
}

// A worker whose dial hangs (a deleted pod's address) holds its poll no
// longer than Timeout: the dial is given what is left of it.
func TestHangingDialEndsWithThePoll(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var given time.Duration
		p := New(Config{Targets: []Target{{Addr: "blackhole:30000"}}, Timeout: time.Second,
			Log: zerolog.New(zerolog.NewTestWriter(t)),
			Dial: func(_ string, timeout time.Duration) (net.Conn, error) {
				given = timeout
				<-time.After(timeout)
				return nil, errors.New("dial timed out")
			}})
		start := time.Now()
		p.PollOnce(context.Background())
		if took := time.Since(start); given <= 0 || given > time.Second || took > time.Second {
			t.Fatalf("the dial was given %s and the poll took %s; want both within the 1 s Timeout", given, took)
		}
		if p.Get("blackhole:30000").Known() {
			t.Fatal("a worker never reached has a known load")
		}
	})
}
