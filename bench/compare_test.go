package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// serveTargets runs each handler as a fake endpoint on an in-memory
// listener, reached as http://NAME.test, and returns the targets and a
// Config whose Dial routes to them.
func serveTargets(t *testing.T, names []string, hs ...fasthttp.RequestHandler) ([]Target, Config) {
	t.Helper()
	lns := map[string]*fasthttputil.InmemoryListener{}
	var targets []Target
	for i, h := range hs {
		ln := fasthttputil.NewInmemoryListener()
		srv := &fasthttp.Server{Handler: h, Logger: discard{}}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = ln.Close() })
		lns[names[i]+".test:80"] = ln
		targets = append(targets, Target{Name: names[i], URL: "http://" + names[i] + ".test"})
	}
	return targets, Config{
		Timeout: 5 * time.Second,
		Dial: func(_ context.Context, addr string) (net.Conn, error) {
			ln, ok := lns[addr]
			if !ok {
				return nil, fmt.Errorf("no fake endpoint at %s", addr)
			}
			return ln.Dial()
		},
	}
}

// turns records which target each request reached, in order.
type turns struct {
	mu  sync.Mutex
	seq []string
}

func (tr *turns) handler(name string, delay time.Duration) fasthttp.RequestHandler {
	h := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":2}}`)
	return func(ctx *fasthttp.RequestCtx) {
		tr.mu.Lock()
		tr.seq = append(tr.seq, name)
		tr.mu.Unlock()
		if delay > 0 {
			pause(delay) // the slowness being measured
		}
		h(ctx)
	}
}

// stints counts the runs of consecutive requests to one target, and how
// many requests each target got.
func (tr *turns) stints() (int, map[string]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n, per := 0, map[string]int{}
	for i, name := range tr.seq {
		if i == 0 || tr.seq[i-1] != name {
			n++
		}
		per[name]++
	}
	return n, per
}

// TestCompare runs the same closed loop on a fast target and on one that
// takes 4 ms a request, in rounds: the slow one must show it, the turns
// must alternate without overlapping, and the table's ratios must be the
// reports' own.
func TestCompare(t *testing.T) {
	t.Parallel()
	const slowness = 4 * time.Millisecond
	tr := &turns{}
	targets, cfg := serveTargets(t, []string{"fast", "slow"}, tr.handler("fast", 0), tr.handler("slow", slowness))
	cfg.Duration = 4 * minRound
	cfg.Round = minRound
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 4 || c.Round != minRound || len(c.Reports) != 2 {
		t.Fatalf("got %d rounds of %v, %d reports; want 4 of %v, 2", c.Rounds, c.Round, len(c.Reports), minRound)
	}
	fast, slow := c.Reports[0], c.Reports[1]
	stints, per := tr.stints()
	// A B A B A B A B: eight stints, fewer only if a round sent nothing.
	if stints < 3 || stints > 8 {
		t.Fatalf("got %d stints of requests to one target; want 3 to 8 (alternating rounds, no overlap)", stints)
	}
	for _, r := range c.Reports {
		if r.Requests != per[r.Name] || r.OK != r.Requests || r.Elapsed < 3*minRound {
			t.Fatalf("%s: got %d requests (%d ok), elapsed %v; want the endpoint's %d, all ok, about 4 rounds",
				r.Name, r.Requests, r.OK, r.Elapsed, per[r.Name])
		}
	}
	if slow.Latency.Min < slowness || fast.Latency.P50 >= slow.Latency.P50 || fast.RequestsPerSec <= slow.RequestsPerSec {
		t.Fatalf("got fast p50 %v, %.1f req/s; slow min %v, p50 %v, %.1f req/s; want slow measurably slower",
			fast.Latency.P50, fast.RequestsPerSec, slow.Latency.Min, slow.Latency.P50, slow.RequestsPerSec)
	}
	var b bytes.Buffer
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	checkRow(t, b.String(), "req/s", strconv.FormatFloat(fast.RequestsPerSec, 'f', 1, 64),
		strconv.FormatFloat(slow.RequestsPerSec, 'f', 1, 64),
		strconv.FormatFloat(slow.RequestsPerSec/fast.RequestsPerSec, 'f', 3, 64))
	checkRow(t, b.String(), "latency p50 ms", formatMillis(fast.Latency.P50), formatMillis(slow.Latency.P50),
		strconv.FormatFloat(float64(slow.Latency.P50)/float64(fast.Latency.P50), 'f', 3, 64))
}

// checkRow finds the table row named name and checks its cells.
func checkRow(t *testing.T, table, name string, want ...string) {
	t.Helper()
	for line := range strings.Lines(table) {
		if rest, ok := strings.CutPrefix(line, name+"  "); ok {
			if got := strings.Fields(rest); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("got row %q cells %q; want %q in\n%s", name, got, want, table)
			}
			return
		}
	}
	t.Fatalf("got no row %q; want one in\n%s", name, table)
}

func TestComparisonText(t *testing.T) {
	base := &Report{
		Name: "direct", URL: "http://d:1", Route: RouteGenerate, Stream: true, Concurrency: 4,
		MaxNewTokens: Fixed(32), PromptWords: Fixed(8),
		Requests: 400, OK: 400, Errors: map[string]int{}, RequestsPerSec: 200, OutputTokensPerSec: 6400, EventsPerSec: 6400,
		Latency: Summary{Count: 400, P50: 10 * time.Millisecond, P90: 12 * time.Millisecond, P99: 20 * time.Millisecond, Max: 30 * time.Millisecond},
		TTFT:    Summary{Count: 400, P50: time.Millisecond, P90: time.Millisecond, P99: 2 * time.Millisecond, Max: 5 * time.Millisecond},
		ITL:     Summary{Count: 12400, P50: 300 * time.Microsecond, P90: 400 * time.Microsecond, P99: 500 * time.Microsecond},
	}
	other := *base
	other.Name, other.URL = "pdlb", "http://p:2"
	other.Requests, other.OK = 110, 100
	other.Errors = map[string]int{"status_502": 10}
	other.ErrorMessages = []ErrorMessage{{Kind: "status_502", Message: "no decode", Count: 7}, {Kind: "status_502", Message: "", Count: 1}}
	other.RequestsPerSec, other.OutputTokensPerSec, other.EventsPerSec = 50, 1600, 1600
	other.Latency.P50 = 40 * time.Millisecond
	other.EventLag = Summary{Count: 3200, P50: 2 * time.Millisecond, P90: 3 * time.Millisecond, P99: 4 * time.Millisecond, Max: 9 * time.Millisecond}
	c := &Comparison{Rounds: 3, Round: 2500 * time.Millisecond, Reports: []*Report{base, &other}}
	var b bytes.Buffer
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"compare      /generate (stream, concurrency 4); 3 rounds of 2.50 s per target, in turns\n",
		"workload     8-word prompts, 32 new tokens\n",
		"direct       http://d:1 (0 warm-up requests not counted)\n",
		"lag          server's sent_unix_nano",
		"                      direct        pdlb  pdlb/direct\n",
		"\nerrors of pdlb  status_502 7 times: no decode\n" +
			"                status_502 1 time: (no message)\n" +
			"and 2 failures with other messages\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("got\n%s\nwant it to contain %q", out, want)
		}
	}
	checkRow(t, out, "requests", "400", "110", "0.275")
	checkRow(t, out, "errors", "0", "10", "-")
	checkRow(t, out, "  status_502", "0", "10", "-")
	checkRow(t, out, "req/s", "200.0", "50.0", "0.250")
	checkRow(t, out, "events/s", "6400.0", "1600.0", "0.250")
	checkRow(t, out, "latency p50 ms", "10.0", "40.0", "4.000")
	checkRow(t, out, "latency max ms", "30.0", "30.0", "1.000")
	checkRow(t, out, "itl p99 ms", "0.500", "0.500", "1.000")
	checkRow(t, out, "lag p50 ms", "-", "2.00", "-")
	checkRow(t, out, "lag max ms", "-", "9.00", "-")
	// As in the single-target table; they were once left out.
	checkRow(t, out, "ttft max ms", "5.00", "5.00", "1.000")
	checkRow(t, out, "itl max ms", "0.000", "0.000", "-")
	if strings.Contains(out, "interrupted") {
		t.Fatalf("got\n%s\nwant no interruption", out)
	}
}

// TestCompareInterrupted cuts a comparison in the second round of its
// second target. It once reported the rounds planned, and the first
// target's two turns against the second's one: the figures must be those
// of the one round both completed.
func TestCompareInterrupted(t *testing.T) {
	t.Parallel()
	tr := &turns{}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	hanging := make(chan struct{}, 1)
	b := tr.handler("b", 0)
	targets, cfg := serveTargets(t, []string{"a", "b"}, tr.handler("a", 0), func(ctx *fasthttp.RequestCtx) {
		if n, _ := tr.stints(); n >= 3 { // a b a: b's second round
			select {
			case hanging <- struct{}{}:
			default:
			}
			<-hang
			return
		}
		b(ctx)
	})
	cfg.Duration = 3 * minRound
	cfg.Round = minRound
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		select {
		case <-hanging:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := Compare(ctx, cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 1 || c.Planned != 3 {
		t.Fatalf("got %d of %d rounds; want 1 of 3", c.Rounds, c.Planned)
	}
	tr.mu.Lock()
	first := map[string]int{} // requests of each target's first turn
	for i, name := range tr.seq {
		if i > 0 && tr.seq[i-1] != name && name == "a" {
			break
		}
		first[name]++
	}
	tr.mu.Unlock()
	for _, r := range c.Reports {
		if !r.Interrupted || r.Requests != first[r.Name] || r.OK != r.Requests || r.Requests == 0 {
			t.Fatalf("%s: got %d requests (%d ok), interrupted %v; want the %d of its first round, all ok, interrupted",
				r.Name, r.Requests, r.OK, r.Interrupted, first[r.Name])
		}
	}
	var out bytes.Buffer
	if err := c.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "1 of 3 rounds"; !strings.Contains(out.String(), want) {
		t.Fatalf("got\n%s\nwant it to contain %q", out.String(), want)
	}
}

func TestCompareJSON(t *testing.T) {
	c := &Comparison{Rounds: 2, Round: 1500 * time.Millisecond, MaxRound: 2 * time.Second, Reports: []*Report{
		{Name: "a", Errors: map[string]int{}, MaxNewTokens: Dist{Law: LawNormal, A: 16, B: 4}},
		{Name: "b", Errors: map[string]int{}, Prompts: 3},
	}}
	var b bytes.Buffer
	if err := c.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rounds": 2`, `"round_s": 1.5`, `"max_round_s": 2`, `"name": "a"`, `"name": "b"`,
		`"max_new_tokens": "normal:16:4"`, `"prompts": 3`, `"event_lag": {`, `"events_per_s": 0`} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("got\n%s\nwant it to contain %q", b.String(), want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	f := func(s string, want Target, wantErr string) {
		t.Helper()
		got, err := ParseTarget(s)
		if wantErr != "" {
			if err == nil || err.Error() != wantErr {
				t.Fatalf("ParseTarget(%q): got error %v; want %q", s, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("ParseTarget(%q): got %+v, %v; want %+v", s, got, err, want)
		}
	}
	f("pdlb=http://127.0.0.1:8000", Target{"pdlb", "http://127.0.0.1:8000"}, "")
	f("a=http://h/p?x=1", Target{"a", "http://h/p?x=1"}, "")
	f("http://127.0.0.1:8000", Target{}, `cannot parse target "http://127.0.0.1:8000": want NAME=URL`)
	f("=http://h", Target{}, `cannot parse target "=http://h": want NAME=URL`)
	f("a=", Target{}, `cannot parse target "a=": want NAME=URL`)
}

func TestPlanRounds(t *testing.T) {
	f := func(total, round time.Duration, wantN int, wantD time.Duration) {
		t.Helper()
		if n, d := planRounds(total, round); n != wantN || d != wantD {
			t.Fatalf("planRounds(%v, %v): got %d of %v; want %d of %v", total, round, n, d, wantN, wantD)
		}
	}
	f(10*time.Second, 3*time.Second, 4, 2500*time.Millisecond)
	f(9*time.Second, 3*time.Second, 3, 3*time.Second)
	f(10*time.Second, 10*time.Second, 1, 10*time.Second)
	f(2*time.Second, 3*time.Second, 1, 2*time.Second)
	f(time.Second, 300*time.Millisecond, 4, 250*time.Millisecond)
}

func TestCompareInvalid(t *testing.T) {
	ok := []Target{{"a", "http://a"}, {"b", "http://b"}}
	for _, tc := range []struct {
		name    string
		cfg     Config
		targets []Target
		want    string
	}{
		{"no targets", Config{}, nil, "compare needs at least one target"},
		{"same name", Config{}, []Target{{"a", "http://a"}, {"a", "http://b"}}, `two targets are named "a"`},
		{"no name", Config{}, []Target{{"", "http://a"}}, `target ""="http://a": want a name and a url`},
		{"request count", Config{Requests: 5}, ok, "compare is bounded by duration, not by a request count"},
		{"bad url", Config{}, []Target{{"a", "http://a"}, {"b", "ftp://b"}}, `target b: url "ftp://b": scheme must be http or https`},
		{"bad load", Config{Rate: 1, Concurrency: 1}, ok, "concurrency and rate are exclusive"},
		// Once planned 100,000 rounds for one second.
		{"short round", Config{Duration: time.Second, Round: 10 * time.Microsecond}, ok, "round must be at least 100ms, not 10µs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compare(t.Context(), tc.cfg, tc.targets)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || c != nil {
				t.Fatalf("got %v, error %v; want no comparison, an error starting %q", c, err, tc.want)
			}
		})
	}
}

// TestCompareOpenLoop runs an open loop in rounds: each round of a target
// sends the arrivals its schedule puts inside the round, the schedule going
// on from round to round, with the workers of earlier rounds reused.
func TestCompareOpenLoop(t *testing.T) {
	// Not in parallel: it counts every arrival of a short window, and a
	// generator starved past maxOverrun ends the round early.
	const (
		rate  = 1000.0
		round = minRound
		seed  = 11
	)
	// Each target draws the same schedule; a round ends on the first
	// arrival past it, which is drawn but not sent.
	a := newArrivals(rate, seed)
	want := 0
	for range 2 {
		for at := a.next(); at < round; at += a.next() {
			want++
		}
	}
	tr := &turns{}
	targets, cfg := serveTargets(t, []string{"a", "b"}, tr.handler("a", 0), tr.handler("b", 0))
	cfg.Rate = rate
	cfg.Seed = seed
	cfg.Duration = 2 * round
	cfg.Round = round
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	_, per := tr.stints()
	for _, r := range c.Reports {
		if r.Requests != want || r.OK != want || per[r.Name] != want {
			t.Fatalf("%s: got %d requests (%d ok), endpoint %d; want %d", r.Name, r.Requests, r.OK, per[r.Name], want)
		}
	}
}
