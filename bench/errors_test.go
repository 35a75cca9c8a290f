package bench

import (
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestRunErrorKinds(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	for _, tc := range []struct {
		name   string
		stream bool
		h      fasthttp.RequestHandler
		kind   string
		msg    string // what ErrorMessages must say
	}{{
		name: "bad gateway",
		h:    jsonHandler(&recorder{}, fasthttp.StatusBadGateway, `{"error":{"message":"no decode"}}`),
		kind: "status_502",
		msg:  `no decode`,
	}, {
		name:   "bad gateway on a stream",
		stream: true,
		h:      jsonHandler(&recorder{}, fasthttp.StatusBadGateway, `{"error":{"message":"no decode"}}`),
		kind:   "status_502",
		msg:    `no decode`,
	}, {
		name: "body not JSON",
		h:    jsonHandler(&recorder{}, fasthttp.StatusOK, `Internal Server Error`),
		kind: KindBadBody,
		msg:  `not JSON: Internal Server Error`,
	}, {
		name: "error object with 200",
		h:    jsonHandler(&recorder{}, fasthttp.StatusOK, `{"error":{"message":"boom"}}`),
		kind: KindBadBody,
		msg:  `boom`,
	}, {
		name:   "stream without DONE",
		stream: true,
		h:      streamHandler(&recorder{}, []string{`{"text":" a"}`, `{"text":" a b"}`}, nil),
		kind:   KindStreamError,
		msg:    `the stream ended before data: [DONE]`,
	}, {
		name:   "stream with an error event",
		stream: true,
		h: streamHandler(&recorder{}, []string{
			`{"text":" a"}`,
			`{"error":{"message":"KV transfer failed","type":"InternalServerError","code":500}}`,
			`[DONE]`,
		}, nil),
		kind: KindStreamError,
		msg:  `KV transfer failed`,
	}, {
		name: "aborted answer",
		h: jsonHandler(&recorder{}, fasthttp.StatusOK,
			`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Aborted by AbortReq.","status_code":null}}}`),
		kind: KindAborted,
		msg:  `Aborted by AbortReq.`,
	}, {
		name:   "stream refused without a room",
		stream: true,
		h: streamHandler(&recorder{}, []string{
			`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Invalid request: Disaggregated request received without bootstrap room id.","status_code":400}}}`,
			`[DONE]`,
		}, nil),
		kind: KindAborted,
		msg:  `Invalid request: Disaggregated request received without bootstrap room id.`,
	}, {
		name:   "stream event not JSON",
		stream: true,
		h:      streamHandler(&recorder{}, []string{`{"text":`, `[DONE]`}, nil),
		kind:   KindBadBody,
		msg:    `event not JSON: {"text":`,
	}, {
		name: "no answer in time",
		h:    func(*fasthttp.RequestCtx) { <-block },
		kind: KindTimeout,
		msg:  `did not end within 50ms`,
	}, {
		name:   "stream stalls",
		stream: true,
		h: streamHandler(&recorder{}, []string{`{"text":" a"}`, `[DONE]`}, func(i int) {
			if i == 1 {
				<-block
			}
		}),
		kind: KindTimeout,
		msg:  `did not end within 50ms`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serve(t, tc.h)
			cfg.Stream = tc.stream
			cfg.Requests = 3
			cfg.Timeout = 50 * time.Millisecond
			rep := run(t, cfg)

			checkCounts(t, rep, 3, 0)
			if len(rep.Errors) != 1 || rep.Errors[tc.kind] != 3 {
				t.Fatalf("got errors %v; want %s: 3", rep.Errors, tc.kind)
			}
			if want := []ErrorMessage{{Kind: tc.kind, Message: tc.msg, Count: 3}}; !slices.Equal(rep.ErrorMessages, want) {
				t.Fatalf("got error messages %+v; want %+v", rep.ErrorMessages, want)
			}
			if rep.Latency.Count != 0 || rep.TTFT.Count != 0 || rep.ITL.Count != 0 || rep.OutputTokens != 0 {
				t.Fatalf("got figures from failed requests: latency %+v, ttft %+v, itl %+v, %d tokens",
					rep.Latency, rep.TTFT, rep.ITL, rep.OutputTokens)
			}
		})
	}
}

func TestRunConnectError(t *testing.T) {
	t.Parallel()
	rep := run(t, Config{URL: "http://fake.test", Requests: 2, Dial: refused})
	checkCounts(t, rep, 2, 0)
	if rep.Errors[KindConnect] != 2 {
		t.Fatalf("got errors %v; want %s: 2", rep.Errors, KindConnect)
	}
	if want := []ErrorMessage{{Kind: KindConnect, Message: "cannot connect: connection refused", Count: 2}}; !slices.Equal(rep.ErrorMessages, want) {
		t.Fatalf("got error messages %+v; want %+v", rep.ErrorMessages, want)
	}
}

// refused is a Dial to a dead target: every connection is refused at once.
func refused(context.Context, string) (net.Conn, error) {
	return nil, errors.New("connection refused")
}

// TestRunConnectErrorPause loads a dead target for 500 ms with two
// clients. Each went straight on after a refused connection, and sent tens
// of thousands of requests a second; each must pause 100 ms instead. The
// open loop keeps its schedule: one request per arrival.
func TestRunConnectErrorPause(t *testing.T) {
	// Not in parallel: it counts every arrival of a short window, and a
	// generator starved past maxOverrun ends the round early.
	const d = 500 * time.Millisecond
	rep := run(t, Config{URL: "http://fake.test", Concurrency: 2, Duration: d, Timeout: 5 * time.Second, Dial: refused})
	// Per client: one at the start, then one after each pause.
	if most := 2 * int(1+d/connectPause); rep.Requests == 0 || rep.Requests > most || rep.Errors[KindConnect] != rep.Requests {
		t.Fatalf("got %d requests, errors %v; want from 1 to %d, all %s", rep.Requests, rep.Errors, most, KindConnect)
	}

	const (
		rate = 1000.0
		seed = 7
		od   = 100 * time.Millisecond
	)
	want := arrivalsWithin(rate, seed, od)
	rep = run(t, Config{URL: "http://fake.test", Rate: rate, Seed: seed, Duration: od, Timeout: 5 * time.Second, Dial: refused})
	if rep.Requests != want || rep.Errors[KindConnect] != want {
		t.Fatalf("open loop: got %d requests, errors %v; want %d, all %s", rep.Requests, rep.Errors, want, KindConnect)
	}
}

// TestRunConnectErrorPauseEnds pauses an hour after a refused connection:
// the pause must end with the window, and at once when the run is cut.
func TestRunConnectErrorPauseEnds(t *testing.T) {
	t.Parallel()
	const clients = 3
	cfg := Config{URL: "http://fake.test", Concurrency: clients, Duration: 300 * time.Millisecond, Timeout: 5 * time.Second,
		Dial: refused, connectPause: time.Hour}
	done := runAsync(t, t.Context(), cfg)
	select {
	case rep := <-done:
		if rep.Requests > clients || rep.Interrupted {
			t.Fatalf("got %d requests, interrupted %v; want at most one per client, a complete run", rep.Requests, rep.Interrupted)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the pause outlasted the window")
	}

	dialled := make(chan struct{}, clients)
	cfg.Duration = time.Minute
	cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		select {
		case dialled <- struct{}{}:
		default:
		}
		return refused(ctx, addr)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done = runAsync(t, ctx, cfg)
	select {
	case <-dialled:
	case <-time.After(5 * time.Second):
		t.Fatal("no client dialled")
	}
	cancel()
	select {
	case rep := <-done:
		if !rep.Interrupted {
			t.Fatal("got a complete run; want an interrupted one")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the pause held the interrupted run")
	}
}

// TestRunCancel cancels the run while a request hangs, waiting for its
// answer or in the middle of its stream: Run must return at once with the
// requests that finished before.
func TestRunCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
	}{
		{name: "waiting for the answer"},
		{name: "in the middle of a stream", stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hang := make(chan struct{})
			t.Cleanup(func() { close(hang) })
			hanging := make(chan struct{}, 1)
			rc := &recorder{}
			events := []string{`{"text":" a"}`, `{"text":" a b"}`, `[DONE]`}
			cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
				if rc.count() < 2 {
					streamOrJSON(rc, tc.stream, events, nil)(ctx)
					return
				}
				streamOrJSON(rc, tc.stream, events, func(i int) {
					if i == 1 || !tc.stream {
						hanging <- struct{}{}
						<-hang
					}
				})(ctx)
			})
			cfg.Stream = tc.stream
			cfg.Duration = time.Minute

			rep := runUntil(t, cfg, hanging, "the third request reaching the endpoint")
			checkCounts(t, rep, 2, 2)
			if !rep.Interrupted {
				t.Fatalf("got a complete report; want an interrupted one")
			}
		})
	}
}

// streamOrJSON answers with events as a stream, or with the first one as a
// JSON body, after wait(0) in the latter case.
func streamOrJSON(rc *recorder, stream bool, events []string, wait func(int)) fasthttp.RequestHandler {
	if stream {
		return streamHandler(rc, events, wait)
	}
	h := jsonHandler(rc, fasthttp.StatusOK, events[0])
	return func(ctx *fasthttp.RequestCtx) {
		if wait != nil {
			wait(0)
		}
		h(ctx)
	}
}

func TestRunInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no url", Config{}, "url is required"},
		{"bad route", Config{URL: "http://x", Route: "/v1/embeddings"}, `unsupported route "/v1/embeddings"`},
		{"negative concurrency", Config{URL: "http://x", Concurrency: -1}, "concurrency must not be negative"},
		{"negative requests", Config{URL: "http://x", Requests: -3}, "requests must not be negative"},
		{"negative timeout", Config{URL: "http://x", Timeout: -time.Second}, "timeout must not be negative"},
		{"bad scheme", Config{URL: "ftp://x"}, "scheme must be http or https"},
		{"no scheme", Config{URL: "127.0.0.1:8000"}, "127.0.0.1:8000"},
		{"no host", Config{URL: "http:///generate"}, "has no host"},
		{"query", Config{URL: "http://x/?a=1"}, "without query"},
		// Each request once failed to connect instead.
		{"port too high", Config{URL: "http://127.0.0.1:99999"}, `url "http://127.0.0.1:99999": port must be from 1 to 65535`},
		{"port 0", Config{URL: "http://[::1]:0/v1"}, "port must be from 1 to 65535"},
		{"rate and concurrency", Config{URL: "http://x", Rate: 5, Concurrency: 2},
			"concurrency and rate are exclusive: concurrency makes a closed loop, rate an open one"},
		{"negative rate", Config{URL: "http://x", Rate: -1}, "rate must be a finite number of requests per second, not -1"},
		{"NaN rate", Config{URL: "http://x", Rate: math.NaN()}, "rate must be a finite number of requests per second, not NaN"},
		{"negative max inflight", Config{URL: "http://x", MaxInflight: -1}, "max inflight must not be negative"},
		{"negative round", Config{URL: "http://x", Round: -time.Second}, "round must not be negative"},
		{"bad prompt words", Config{URL: "http://x", PromptWords: Dist{Law: LawUniform, A: 5, B: 1}},
			"prompt words: want 1 <= MIN <= MAX <= 1048576, not 5 and 1"},
		{"bad max new tokens", Config{URL: "http://x", MaxNewTokens: Fixed(0)}, "max new tokens: want a value from 1 to 1048576, not 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(t.Context(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v; want one containing %q", err, tc.want)
			}
			if rep != nil {
				t.Fatalf("got a report %+v with an error", rep)
			}
		})
	}
}

// TestRunEmptyEvent sends "data:" events with nothing in them, which the
// bench once counted as bad bodies: they carry no JSON and no token, and
// must be skipped.
func TestRunEmptyEvent(t *testing.T) {
	rc := &recorder{}
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		rc.add(ctx)
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString("data:\n\ndata: {\"text\":\" a\"}\n\ndata\n\ndata: {\"text\":\" a b\"}\n\ndata: [DONE]\n\n")
	})
	cfg.Stream = true
	cfg.Requests = 2
	rep := run(t, cfg)
	checkCounts(t, rep, 2, 2)
	if rep.Events != 4 || rep.OutputTokens != 4 {
		t.Fatalf("got %d events, %d tokens; want 4, 4 (the empty events skipped)", rep.Events, rep.OutputTokens)
	}
}

// TestRunCancelWhileDialling cancels the run while every client is still
// connecting: Run must return at once, the dials ended by its context.
func TestRunCancelWhileDialling(t *testing.T) {
	dialling := make(chan struct{}, 1)
	cfg := Config{
		URL:         "http://fake.test",
		Concurrency: 2,
		Duration:    time.Minute,
		Timeout:     time.Minute,
		Dial: func(ctx context.Context, _ string) (net.Conn, error) {
			select {
			case dialling <- struct{}{}:
			default:
			}
			<-ctx.Done() // a target that never answers the SYN
			return nil, ctx.Err()
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := runAsync(t, ctx, cfg)
	select {
	case <-dialling:
	case <-time.After(5 * time.Second):
		t.Fatal("no client dialled")
	}
	cancel()
	select {
	case rep := <-done:
		if !rep.Interrupted || rep.Requests != 0 {
			t.Fatalf("got %d requests, interrupted %v; want none, interrupted", rep.Requests, rep.Interrupted)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
