package bench

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestRunGenerate(t *testing.T) {
	rc := &recorder{}
	cfg := serve(t, jsonHandler(rc, fasthttp.StatusOK,
		`{"text":" tok1 tok2","output_ids":[1,2],"meta_info":{"completion_tokens":5}}`))
	cfg.Requests = 10
	cfg.Concurrency = 3 // does not divide Requests: the count must still be exact
	cfg.MaxNewTokens = Fixed(5)
	cfg.PromptWords = Fixed(6)
	rep := run(t, cfg)

	checkCounts(t, rep, 10, 10)
	if got := rc.count(); got != 10 {
		t.Fatalf("endpoint got %d requests; want 10", got)
	}
	want := cfg.withDefaults()
	prompts := map[string]bool{}
	for i, body := range rc.bodies {
		if rc.paths[i] != RouteGenerate {
			t.Fatalf("got path %q; want %q", rc.paths[i], RouteGenerate)
		}
		if err := checkBody(want, body); err != nil {
			t.Fatal(err)
		}
		prompts[body] = true
	}
	if len(prompts) != 10 {
		t.Fatalf("got %d distinct bodies in 10 requests; want 10", len(prompts))
	}
	if rep.OutputTokens != 50 {
		t.Fatalf("got %d output tokens; want 50", rep.OutputTokens)
	}
	if rep.Latency.Count != 10 || rep.TTFT != rep.Latency {
		t.Fatalf("got ttft %+v; want it equal to latency %+v", rep.TTFT, rep.Latency)
	}
	if rep.ITL.Count != 0 {
		t.Fatalf("got %d inter-token samples for a non-stream run; want 0", rep.ITL.Count)
	}
	if rep.Elapsed <= 0 || rep.RequestsPerSec <= 0 || rep.OutputTokensPerSec <= 0 {
		t.Fatalf("got elapsed %v, %v req/s, %v tok/s; want them positive", rep.Elapsed, rep.RequestsPerSec, rep.OutputTokensPerSec)
	}
}

// TestRunOverIPv6 loads an endpoint that listens on the IPv6 loopback
// only, over real TCP.
func TestRunOverIPv6(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %s", err)
	}
	rc := &recorder{}
	srv := &fasthttp.Server{Handler: jsonHandler(rc, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	rep := run(t, Config{URL: "http://" + ln.Addr().String(), Requests: 3, Concurrency: 1, Timeout: 5 * time.Second})
	checkCounts(t, rep, 3, 3)
	if got := rc.count(); got != 3 {
		t.Fatalf("the endpoint got %d requests; want 3", got)
	}
}

func TestRunRoutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		route  string
		stream bool
		events []string // a stream's events, or the body of a non-stream answer
		tokens int64    // per request
		itl    int      // inter-token samples per request
	}{{
		name:   "generate stream: cumulative meta_info",
		route:  RouteGenerate,
		stream: true,
		events: []string{
			`{"text":" a","meta_info":{"completion_tokens":1}}`,
			`{"text":" a b","meta_info":{"completion_tokens":2}}`,
			`{"text":" a b c","meta_info":{"completion_tokens":4}}`,
			`[DONE]`,
		},
		tokens: 4,
		itl:    3, // the last event's gap, divided between its 2 tokens
	}, {
		name:   "generate stream: a count that does not grow",
		route:  RouteGenerate,
		stream: true,
		events: []string{
			`{"text":" a b","meta_info":{"completion_tokens":2}}`,
			`{"text":" a b","meta_info":{"completion_tokens":2}}`,
			`{"text":" a b c d e","meta_info":{"completion_tokens":5}}`,
			`[DONE]`,
		},
		tokens: 5,
		itl:    3,
	}, {
		name:   "chat stream: usage in every chunk",
		route:  RouteChatCompletions,
		stream: true,
		events: []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}`,
			`{"choices":[{"index":0,"delta":{"content":" a"}}],"usage":{"completion_tokens":1}}`,
			`{"choices":[{"index":0,"delta":{"content":" b c d"}}],"usage":{"completion_tokens":4}}`,
			`{"choices":[],"usage":{"completion_tokens":4}}`,
			`[DONE]`,
		},
		tokens: 4,
		itl:    3,
	}, {
		name:   "completions stream: final usage chunk",
		route:  RouteCompletions,
		stream: true,
		events: []string{
			`{"object":"text_completion","choices":[{"index":0,"text":" a"}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":" b"}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":" c"}]}`,
			`{"object":"text_completion","choices":[{"index":0,"text":" d"}]}`,
			`{"object":"text_completion","choices":[],"usage":{"completion_tokens":7}}`,
			`[DONE]`,
		},
		tokens: 7,
		itl:    3,
	}, {
		name:   "chat stream: no usage, role chunk has no token",
		route:  RouteChatCompletions,
		stream: true,
		events: []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
			`{"choices":[{"index":0,"delta":{"content":" a"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":" b"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":" c"}}],"usage":null}`,
			`[DONE]`,
		},
		tokens: 3,
		itl:    2,
	}, {
		name:   "chat non-stream",
		route:  RouteChatCompletions,
		events: []string{`{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":" a b"}}],"usage":{"prompt_tokens":9,"completion_tokens":9}}`},
		tokens: 9,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{}
			h := jsonHandler(rc, fasthttp.StatusOK, tc.events[0])
			if tc.stream {
				h = streamHandler(rc, tc.events, nil)
			}
			cfg := serve(t, h)
			cfg.Route = tc.route
			cfg.Stream = tc.stream
			cfg.Model = "m1"
			cfg.MaxNewTokens = Fixed(7)
			cfg.Requests = 4
			cfg.Concurrency = 2
			rep := run(t, cfg)

			checkCounts(t, rep, 4, 4)
			want := cfg.withDefaults()
			for i, body := range rc.bodies {
				if rc.paths[i] != tc.route {
					t.Fatalf("got path %q; want %q", rc.paths[i], tc.route)
				}
				if err := checkBody(want, body); err != nil {
					t.Fatal(err)
				}
			}
			if rep.OutputTokens != 4*tc.tokens {
				t.Fatalf("got %d output tokens; want %d", rep.OutputTokens, 4*tc.tokens)
			}
			if rep.TTFT.Count != 4 || rep.ITL.Count != 4*tc.itl {
				t.Fatalf("got %d ttft and %d itl samples; want 4 and %d", rep.TTFT.Count, rep.ITL.Count, 4*tc.itl)
			}
		})
	}
}

// TestRunStreamTiming paces a stream's events and checks the figures
// against bounds that hold however the goroutines are scheduled: an event
// cannot arrive before it was sent, and the request started before the
// endpoint saw it.
func TestRunStreamTiming(t *testing.T) {
	t.Parallel()
	const (
		first    = 20 * time.Millisecond // before the first token
		gap      = 10 * time.Millisecond // between tokens
		tokens   = 4
		requests = 3
	)
	events := []string{`{"text":" a"}`, `{"text":" a b"}`, `{"text":" a b c"}`, `{"text":" a b c d"}`, `[DONE]`}
	wait := func(i int) {
		switch {
		case i == 0:
			pause(first)
		case i < tokens:
			pause(gap)
		}
	}
	cfg := serve(t, streamHandler(&recorder{}, events, wait))
	cfg.Stream = true
	cfg.Requests = requests
	rep := run(t, cfg)

	checkCounts(t, rep, requests, requests)
	total := first + (tokens-1)*gap
	if rep.TTFT.Count != requests || rep.ITL.Count != requests*(tokens-1) {
		t.Fatalf("got %d ttft and %d itl samples; want %d and %d", rep.TTFT.Count, rep.ITL.Count, requests, requests*(tokens-1))
	}
	if rep.TTFT.Min < first {
		t.Fatalf("got min ttft %v; want at least %v", rep.TTFT.Min, first)
	}
	if rep.Latency.Min < total {
		t.Fatalf("got min latency %v; want at least %v", rep.Latency.Min, total)
	}
	// A request's TTFT is at most its latency, so each order statistic is.
	for _, p := range [][2]time.Duration{
		{rep.TTFT.Min, rep.Latency.Min}, {rep.TTFT.P50, rep.Latency.P50}, {rep.TTFT.Max, rep.Latency.Max},
		{rep.ITL.Max, rep.Latency.Max},
	} {
		if p[0] > p[1] {
			t.Fatalf("got %v > %v in ttft %+v, itl %+v, latency %+v", p[0], p[1], rep.TTFT, rep.ITL, rep.Latency)
		}
	}
	// Per request, TTFT plus its gaps spans start to last token, which is at
	// least total; the means are truncated, hence the +1.
	sum := (rep.TTFT.Mean+1)*requests + (rep.ITL.Mean+1)*requests*(tokens-1)
	if sum < requests*total {
		t.Fatalf("got ttft+itl sum %v; want at least %v (ttft %+v, itl %+v)", sum, requests*total, rep.TTFT, rep.ITL)
	}
	if rep.ITL.Min > rep.ITL.P50 || rep.ITL.P50 > rep.ITL.P90 || rep.ITL.P90 > rep.ITL.P99 || rep.ITL.P99 > rep.ITL.Max {
		t.Fatalf("got unordered itl %+v", rep.ITL)
	}
}

// TestRunStreamTokensPerEvent streams one token, then three in one event,
// as SGLang sends what a decode step made at once: the second gap is
// shared among the three, one sample each, as bench_serving does; it was
// one sample of the whole gap.
func TestRunStreamTokensPerEvent(t *testing.T) {
	const (
		first = 20 * time.Millisecond // before the first token
		gap   = 30 * time.Millisecond // before the next three
	)
	events := []string{
		`{"text":" a","meta_info":{"completion_tokens":1}}`,
		`{"text":" a b c d","meta_info":{"completion_tokens":4}}`,
		`[DONE]`,
	}
	cfg := serve(t, streamHandler(&recorder{}, events, func(i int) {
		switch i {
		case 0:
			pause(first)
		case 1:
			pause(gap)
		}
	}))
	cfg.Stream = true
	cfg.Requests = 1
	rep := run(t, cfg)

	checkCounts(t, rep, 1, 1)
	if rep.ITL.Count != 3 || rep.ITL.Min != rep.ITL.Max || rep.OutputTokens != 4 {
		t.Fatalf("got itl %+v, %d tokens; want 3 equal samples, 4 tokens", rep.ITL, rep.OutputTokens)
	}
	// The three samples make up the gap between the events (but the
	// nanoseconds the division drops), which lies between the first
	// token and the end, and ends at least first+gap after the start.
	if shared := 3 * rep.ITL.Max; shared > rep.Latency.Max-rep.TTFT.Max || rep.TTFT.Max+shared+2 < first+gap {
		t.Fatalf("got ttft %v, 3 samples of %v, latency %v; want the samples to fill the gap between the events",
			rep.TTFT.Max, rep.ITL.Max, rep.Latency.Max)
	}
}

// TestRunConcurrency holds the first answers until Concurrency requests are
// in flight at once: with fewer clients or connections the run would time
// out instead.
func TestRunConcurrency(t *testing.T) {
	const n = 8
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	rc := &recorder{}
	h := jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		<-all
		h(ctx)
	})
	cfg.Concurrency = n
	cfg.Requests = 3 * n
	cfg.Timeout = 2 * time.Second
	rep := run(t, cfg)
	checkCounts(t, rep, 3*n, 3*n)
}

// TestRunKeepAlive checks that each client keeps its connection, a stream
// being read to its end included.
func TestRunKeepAlive(t *testing.T) {
	for _, stream := range []bool{false, true} {
		rc := &recorder{}
		events := []string{`{"text":" a"}`, `{"text":" a b"}`, `[DONE]`}
		cfg := serve(t, streamOrJSON(rc, stream, events, nil))
		var dials atomic.Int32
		dial := cfg.Dial
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx, addr)
		}
		cfg.Stream = stream
		cfg.Concurrency = 2
		cfg.Requests = 20
		rep := run(t, cfg)
		checkCounts(t, rep, 20, 20)
		if got := dials.Load(); got > 2 {
			t.Fatalf("stream %v: got %d connections for 2 clients; want at most 2", stream, got)
		}
	}
}

// TestRunWarmupExcluded fails the very first request, which starts during
// the warm-up: it must not show among the figures.
func TestRunWarmupExcluded(t *testing.T) {
	t.Parallel()
	rc := &recorder{}
	fail := jsonHandler(rc, fasthttp.StatusInternalServerError, `{"error":{"message":"cold"}}`)
	pass := jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`)
	var once sync.Once
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		first := false
		once.Do(func() { first = true })
		if first {
			fail(ctx)
			return
		}
		pass(ctx)
	})
	cfg.Warmup = 100 * time.Millisecond
	cfg.Requests = 5
	rep := run(t, cfg)

	checkCounts(t, rep, 5, 5)
	if len(rep.Errors) != 0 {
		t.Fatalf("got errors %v; want none: the failure was during the warm-up", rep.Errors)
	}
	if rep.WarmupRequests < 1 {
		t.Fatalf("got %d warm-up requests; want at least 1", rep.WarmupRequests)
	}
	if got, want := rc.count(), rep.WarmupRequests+5; got != want {
		t.Fatalf("endpoint got %d requests; want %d (warm-up and measured)", got, want)
	}
}

// TestRunWarmupInFlight holds the warm-up's request well past the end of
// the warm-up. The clock of the measured requests must start when they
// do: it once started at the end of the warm-up, and counted the rest of
// that request, with nothing measured in flight, as measured time.
func TestRunWarmupInFlight(t *testing.T) {
	t.Parallel()
	const hold = 300 * time.Millisecond
	var released atomic.Int64 // when the warm-up's answer was let go
	h := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`)
	var once sync.Once
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		once.Do(func() {
			pause(hold) // the long warm-up request
			released.Store(time.Now().UnixNano())
		})
		h(ctx)
	})
	cfg.Warmup = 20 * time.Millisecond
	cfg.Requests = 3
	rep := run(t, cfg)
	returned := time.Now()

	checkCounts(t, rep, 3, 3)
	if rep.WarmupRequests != 1 {
		t.Skipf("got %d warm-up requests; want 1: the machine was too slow to start within the warm-up", rep.WarmupRequests)
	}
	// The measured requests were all sent after the warm-up's answer.
	if limit := returned.Sub(time.Unix(0, released.Load())); rep.Elapsed >= limit {
		t.Fatalf("got elapsed %v; want less than the %v from the warm-up's answer to the end", rep.Elapsed, limit)
	}
}

func TestRunDuration(t *testing.T) {
	rc := &recorder{}
	cfg := serve(t, jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`))
	cfg.Duration = 50 * time.Millisecond
	cfg.Concurrency = 2
	rep := run(t, cfg)

	if rep.Requests == 0 || rep.OK != rep.Requests {
		t.Fatalf("got %d requests, %d ok; want some, all ok", rep.Requests, rep.OK)
	}
	if got := rc.count(); got != rep.Requests {
		t.Fatalf("endpoint got %d requests; want %d", got, rep.Requests)
	}
	if rep.Interrupted {
		t.Fatalf("got an interrupted run; want a complete one")
	}
}

// TestRunEventRateIsWithinTheWindow streams one event at once and one after
// the measured window has closed: events/s counts the first alone, over
// the window, where a rate over whole requests would count both over the
// time until the stream ended. The count shown beside the rate is the one
// it divides (it was the stream's 2), and a stream that fails after the
// window's end still delivered its first event within it (it was left
// out).
func TestRunEventRateIsWithinTheWindow(t *testing.T) {
	t.Parallel()
	const (
		window = 200 * time.Millisecond
		late   = 350 * time.Millisecond // the second event, well past the window
	)
	for _, tc := range []struct {
		name   string
		events []string
		ok     int
	}{
		{"a stream that ends well", []string{`{"text":" a"}`, `{"text":" a b"}`, `[DONE]`}, 1},
		{"a stream that fails after the window", []string{`{"text":" a"}`, `{"error":{"message":"decode lost"}}`, `[DONE]`}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serve(t, streamHandler(&recorder{}, tc.events, func(i int) {
				if i == 1 {
					pause(late)
				}
			}))
			cfg.Stream = true
			cfg.Duration = window
			rep := run(t, cfg)

			checkCounts(t, rep, 1, tc.ok)
			if rep.Events != 1 || rep.EventWindow != window {
				t.Fatalf("got %d events in %v; want the 1 that arrived in the %v window", rep.Events, rep.EventWindow, window)
			}
			if want := 1 / window.Seconds(); rep.EventsPerSec != want {
				t.Fatalf("got %.2f events/s; want %.2f, the one event that arrived in the %v window", rep.EventsPerSec, want, window)
			}
		})
	}
}

// TestRunEventRateWhenRequestsEndTheRun gives a run both Requests and a
// long Duration: the count ends it first, and events/s divides the events
// by the time measured, not by the whole window (it was 60 times too low
// here).
func TestRunEventRateWhenRequestsEndTheRun(t *testing.T) {
	events := []string{`{"text":" a"}`, `{"text":" a b"}`, `[DONE]`}
	for _, rate := range []float64{0, 1000} {
		cfg := serve(t, streamHandler(&recorder{}, events, nil))
		cfg.Stream = true
		cfg.Rate, cfg.Requests, cfg.Duration = rate, 4, time.Minute
		rep := run(t, cfg)
		checkCounts(t, rep, 4, 4)
		if rep.EventWindow <= 0 || rep.EventWindow > rep.Elapsed || rep.Events != 8 ||
			rep.EventsPerSec != float64(rep.Events)/rep.EventWindow.Seconds() {
			t.Fatalf("rate %v: got %d events in %v (elapsed %v), %.1f events/s; want 8 events in the time measured",
				rate, rep.Events, rep.EventWindow, rep.Elapsed, rep.EventsPerSec)
		}
	}
}

// TestRunEventRateInterrupted cuts a run while its stream is in flight,
// once three events have come: they arrived within the measured time,
// which the cut ends, and count for events/s. They were left out, with the
// time to the cut counted all the same.
func TestRunEventRateInterrupted(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	events := []string{`{"text":" a"}`, `{"text":" a b"}`, `{"text":" a b c"}`, `{"text":"!"}`}
	cfg := serve(t, streamHandler(&recorder{}, events, func(i int) {
		if i == 3 {
			<-hang
		}
	}))
	dial := cfg.Dial
	cfg.Stream = true
	for _, load := range []struct {
		rate     float64
		duration time.Duration
		requests int
	}{
		{0, time.Minute, 0},
		{1000, time.Minute, 0},
		// No window: the time runs from the start to the cut.
		{1000, 0, 1000},
	} {
		rate := load.rate
		cfg.Rate, cfg.Duration, cfg.Requests = load.rate, load.duration, load.requests
		// The third event has been read once a read returns its bytes:
		// the reader parses what it holds before it reads again. A
		// channel per run, so the streams of the last one cannot say.
		third := make(chan struct{}, 1)
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return &watchConn{Conn: c, marker: []byte("a b c"), seen: third}, nil
		}
		rep := runUntil(t, cfg, third, "the third event")
		if !rep.Interrupted || rep.Requests != 0 || rep.Events < 3 || rep.EventWindow <= 0 ||
			rep.EventsPerSec != float64(rep.Events)/rep.EventWindow.Seconds() {
			t.Fatalf("rate %v: got %d requests, interrupted %v, %d events in %v, %v events/s; want none, interrupted, at least 3 events, their rate",
				rate, rep.Requests, rep.Interrupted, rep.Events, rep.EventWindow, rep.EventsPerSec)
		}
	}
}

// watchConn signals seen, once, when a read returns bytes with marker in
// them.
type watchConn struct {
	net.Conn
	marker []byte
	seen   chan<- struct{}
}

func (c *watchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if bytes.Contains(p[:n], c.marker) {
		select {
		case c.seen <- struct{}{}:
		default:
		}
	}
	return n, err
}

func TestInWindow(t *testing.T) {
	start := time.Now()
	r := &runner{measureStart: start, measureEnd: start.Add(time.Second)}
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{start.Add(-time.Nanosecond), false},
		{start, true},
		{start.Add(999 * time.Millisecond), true},
		{start.Add(time.Second), false},
	} {
		if got := r.inWindow(tc.at); got != tc.want {
			t.Errorf("inWindow(start%+v) = %v; want %v", tc.at.Sub(start), got, tc.want)
		}
	}
	// A run bounded by Requests alone has no window.
	if (&runner{measureStart: start}).inWindow(start) {
		t.Error("a runner without a window counted an event in it")
	}
}

// TestRunRequestsElapsed runs 9 requests on 8 clients: one client sends
// two in a row, so the run takes at least two requests' time. Elapsed was
// the clients' combined rate, 8 of them at one request per request's time,
// and claimed about 9/8 of one.
func TestRunRequestsElapsed(t *testing.T) {
	const each = 20 * time.Millisecond
	h := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":5}}`)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		pause(each) // the generation time being measured
		h(ctx)
	})
	cfg.Concurrency = 8
	cfg.Requests = 9
	rep := run(t, cfg)

	checkCounts(t, rep, 9, 9)
	if rep.Elapsed < 2*each {
		t.Fatalf("got elapsed %v; want at least %v, two requests in a row", rep.Elapsed, 2*each)
	}
	if s := rep.Elapsed.Seconds(); rep.RequestsPerSec != 9/s || rep.OutputTokensPerSec != 45/s {
		t.Fatalf("got %v req/s, %v tokens/s; want %v and %v, over elapsed %v", rep.RequestsPerSec, rep.OutputTokensPerSec, 9/s, 45/s, rep.Elapsed)
	}
}

// TestMeasuredTime checks the closed loop's Elapsed: the clients' requests
// over their combined rate, whatever each client's busy time.
func TestMeasuredTime(t *testing.T) {
	cfg := Config{Concurrency: 3}
	r := &runner{cfg: &cfg}
	for _, w := range []struct {
		requests int
		busy     time.Duration
	}{{10, time.Second}, {1, 3 * time.Second}, {0, 0}} {
		r.pool.all = append(r.pool.all, &worker{tally: tally{requests: w.requests, busy: w.busy}})
	}
	// 10/s and 1/3 per s: 11 requests at 31/3 per s.
	if got, want := r.measuredTime(), 33*time.Second/31; got.Round(time.Microsecond) != want.Round(time.Microsecond) {
		t.Fatalf("got %v; want %v", got, want)
	}
}
