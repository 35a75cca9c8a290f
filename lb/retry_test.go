package lb

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb/wire"
)

// failing counts the requests of a backend that answers every one with
// status and body.
func failing(served *atomic.Int32, status int, body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		served.Add(1)
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

// A 5xx before anything reached the client is retried on a fresh pair.
func TestFailedPrefillIsRetriedElsewhere(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, stream := range []string{"false", "true"} {
			h := newHarness(t)
			var broken atomic.Int32
			h.backend("prefill-9:30000", failing(&broken, fasthttp.StatusInternalServerError, `{"error": {"message": "oops"}}`))
			h.pair(fake.Config{}, fake.Config{})
			cfg := defaultConfig()
			cfg.Prefill = []PrefillSpec{{URL: "http://prefill-9:30000", BootstrapPort: 8998}, cfg.Prefill[0]}
			cfg.PrefillPolicy = PolicyRoundRobin
			h.start(cfg)
			h.waitFirstReads()
			for range 3 {
				if r := h.post("/generate", `{"text": "a", "stream": `+stream+`}`); r.status != fasthttp.StatusOK {
					t.Fatalf("got %d %s; want the retry's answer", r.status, r.body)
				}
			}
			// Round robin sends every first attempt to the broken prefill (the
			// retry takes the next turn), and every retry to the good one.
			if n := broken.Load(); n != 3 {
				t.Fatalf("the broken prefill got %d requests; want 3", n)
			}
			if got := h.metric("pdlb_retries_total"); got != "3" {
				t.Fatalf("got pdlb_retries_total %q; want 3", got)
			}
		}
	})
}

// A worker that never accepts connections, as one behind a firewall that
// drops them, costs a request only the connect timeout: the request then
// goes to another worker, though it had 30 s to run.
func TestUnacceptingWorkerCostsOnlyTheConnectTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		ln, err := h.nw.Listen("prefill-9:30000") // never accepts
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.Prefill = []PrefillSpec{{URL: "http://prefill-9:30000", BootstrapPort: 8998}, cfg.Prefill[0]}
		cfg.PrefillPolicy = PolicyRoundRobin
		cfg.RequestTimeout = 30 * time.Second
		cfg.ConnectTimeout = 50 * time.Millisecond
		h.start(cfg)
		h.waitFirstReads()
		start := time.Now()
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s; want the retry's answer", r.status, r.body)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("took %s: the dial to the worker that never accepts was not cut short", took)
		}
		if got := h.metric("pdlb_retries_total"); got != "1" {
			t.Fatalf("got pdlb_retries_total %q; want 1", got)
		}
	})
}

// Retries stop at --max-retries, and the client gets the last failure.
func TestRetriesAreBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var served atomic.Int32
		h.backend("prefill-0:30000", failing(&served, fasthttp.StatusServiceUnavailable, `{"error": {"message": "busy"}}`))
		d := h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
		// The decode holds every request, so the prefill's answer always comes
		// first, as a real decode waits for the KV cache.
		if err := d.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.SetFault(fake.Fault{}) })
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusServiceUnavailable || string(r.body) != `{"error": {"message": "busy"}}` {
			t.Fatalf("got %d %s; want the prefill's last answer", r.status, r.body)
		}
		if n := served.Load(); n != 3 {
			t.Fatalf("the prefill got %d attempts; want 1 + 2 retries", n)
		}
	})
}

// A 4xx is the client's fault: never retried.
func TestClientErrorsAreNotRetried(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var served atomic.Int32
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 20 * time.Second})
		h.backend("decode-0:30010", failing(&served, fasthttp.StatusBadRequest, `{"error": {"message": "bad sampling params"}}`))
		srv := h.start(defaultConfig())
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusBadRequest {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if n := served.Load(); n != 1 {
			t.Fatalf("the decode got %d attempts; want 1", n)
		}
		waitIdle(t, srv)
	})
}

func TestDisableRetries(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var served atomic.Int32
		h.backend("prefill-0:30000", failing(&served, fasthttp.StatusInternalServerError, `{}`))
		h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
		cfg := defaultConfig()
		cfg.DisableRetries = true
		h.start(cfg)
		h.post("/generate", `{"text": "a"}`)
		if n := served.Load(); n != 1 {
			t.Fatalf("got %d attempts with retries disabled", n)
		}
	})
}

// stallingDecode answers a stream with the given events, then sends nothing
// until release is closed; a nil release ends the body at once.
func stallingDecode(release <-chan struct{}, events ...string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, ev := range events {
				_, _ = w.WriteString(ev)
				_ = w.Flush()
			}
			if release != nil {
				<-release
			}
		})
	}
}

func TestStreamTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		// wantStatus is the client's status; wantEvents the events before
		// the error event, when the stream started.
		wantStatus int
		wantEvents int
	}{
		{name: "no first byte", wantStatus: fasthttp.StatusGatewayTimeout},
		{name: "stalls between events", events: []string{"data: {\"text\":\"a\"}\n\n"}, wantStatus: fasthttp.StatusOK, wantEvents: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				release := make(chan struct{})
				h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
				h.backend("decode-0:30010", stallingDecode(release, tc.events...))
				t.Cleanup(func() { close(release) })
				cfg := defaultConfig()
				cfg.FirstByteTimeout = 200 * time.Millisecond
				cfg.StreamIdleTimeout = 200 * time.Millisecond
				srv := h.start(cfg)
				start := time.Now()
				s := h.openStream("/generate", `{"text": "a", "stream": true}`)
				got := s.rest()
				if s.status != tc.wantStatus || time.Since(start) > 2*time.Second {
					t.Fatalf("got %d after %s: %q", s.status, time.Since(start), got)
				}
				if tc.wantStatus == fasthttp.StatusOK {
					if len(got) != tc.wantEvents+2 || gjson.Get(strings.TrimPrefix(got[tc.wantEvents], "data: "), "error.code").Int() != 504 ||
						got[len(got)-1] != "data: [DONE]\n\n" {
						t.Fatalf("got %q; want %d events, a 504 error event and [DONE]", got, tc.wantEvents)
					}
					if !strings.Contains(got[tc.wantEvents], "--stream-idle-timeout-secs") {
						t.Fatalf("got %q; want the error to name the idle timeout", got[tc.wantEvents])
					}
				}
				waitIdle(t, srv)
			})
		})
	}
}

// A stream still flowing when the request's time runs out is cut with an
// error that says so; it blamed the decode for a wait.
func TestStreamCutByTheRequestTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for {
					_, _ = w.WriteString("data: {\"text\":\"a\"}\n\n")
					if w.Flush() != nil {
						return
					}
					select {
					case <-release:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			})
		})
		cfg := defaultConfig()
		cfg.RequestTimeout = 300 * time.Millisecond
		srv := h.start(cfg)
		s := h.openStream("/generate", `{"text": "a", "stream": true}`)
		got := s.rest()
		if len(got) < 2 || !strings.Contains(got[len(got)-2], "ran past the request's time limit (--request-timeout-secs)") {
			t.Fatalf("got %q; want an error event naming the request timeout", got)
		}
		waitIdle(t, srv)
	})
}

// oneAtATime gives h a prefill that answers at once and a decode that tells
// inDecode the text of each request, then holds it until release gets a
// value (or closes); cfg admits one request at a time.
func oneAtATime(h *harness) (inDecode chan string, release chan struct{}, cfg Config) {
	inDecode, release = make(chan string, 4), make(chan struct{})
	h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
		inDecode <- gjson.GetBytes(ctx.PostBody(), "text").String()
		<-release
		ctx.SetBodyString(`{"text": "ok"}`)
	})
	cfg = defaultConfig()
	cfg.MaxConcurrentRequests = 1
	return inDecode, release, cfg
}

// Beyond --max-concurrent-requests, requests wait in a bounded queue for a
// bounded time; past either, a 429 with Retry-After.
func TestAdmission(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		inDecode, release, cfg := oneAtATime(h)
		cfg.QueueSize = 1
		cfg.QueueTimeout = 200 * time.Millisecond
		h.start(cfg)

		first := make(chan reply, 1)
		go func() { first <- h.post("/generate", `{"text": "a"}`) }()
		<-inDecode // the first request holds the only slot
		others := make(chan reply, 2)
		for range 2 {
			go func() { others <- h.post("/generate", `{"text": "b"}`) }()
		}
		var full, timedOut int
		for range 2 {
			r := <-others
			msg := gjson.GetBytes(r.body, "error.message").String()
			if r.status != fasthttp.StatusTooManyRequests || r.header.Peek("Retry-After") == nil {
				t.Fatalf("got %d %s; want a 429 with Retry-After", r.status, r.body)
			}
			switch {
			case strings.Contains(msg, "the wait queue is full"):
				full++
			case strings.Contains(msg, "no slot freed up within 200ms") && r.took >= 200*time.Millisecond:
				timedOut++
			default:
				t.Fatalf("got %q after %s", msg, r.took)
			}
		}
		if full != 1 || timedOut != 1 {
			t.Fatalf("got %d turned away and %d timed out; want one each", full, timedOut)
		}
		close(release)
		if r := <-first; r.status != fasthttp.StatusOK {
			t.Fatalf("the admitted request got %d %s", r.status, r.body)
		}
		if r := h.post("/generate", `{"text": "c"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s once the slot was free", r.status, r.body)
		}
	})
}

// With no queue (sglang_router's --queue-size 0), a request beyond the
// limit gets a 429 at once.
func TestAdmissionWithoutQueue(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		inDecode, release, cfg := oneAtATime(h)
		cfg.QueueSize = -1
		h.start(cfg)
		first := make(chan reply, 1)
		go func() { first <- h.post("/generate", `{"text": "a"}`) }()
		<-inDecode
		if r := h.post("/generate", `{"text": "b"}`); r.status != fasthttp.StatusTooManyRequests ||
			!strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "no request waits") {
			t.Fatalf("got %d %s; want a 429 at once", r.status, r.body)
		}
		close(release)
		if r := <-first; r.status != fasthttp.StatusOK {
			t.Fatalf("the admitted request got %d %s", r.status, r.body)
		}
	})
}

// A client that gives up while queued for a slot leaves the queue at once:
// it never reaches the workers, and the slot goes to one still waiting.
func TestClientLeavingTheQueueIsNotServed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		inDecode, release, cfg := oneAtATime(h)
		cfg.QueueSize = 4
		cfg.QueueTimeout = 20 * time.Second
		srv := h.start(cfg)

		first := make(chan reply, 1)
		go func() { first <- h.post("/generate", `{"text": "first"}`) }()
		if got := <-inDecode; got != "first" {
			t.Fatalf("the decode got %q first", got)
		}
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		sendRequest(t, conn, "/generate", `{"text": "gone"}`)
		waitFor(t, "the request to queue", func() bool { return srv.admission.queued.Load() == 1 })
		_ = conn.Close()
		waitFor(t, "the queue to empty", func() bool { return srv.admission.queued.Load() == 0 })
		last := make(chan reply, 1)
		go func() { last <- h.post("/generate", `{"text": "last"}`) }()
		waitFor(t, "the last request to queue", func() bool { return srv.admission.queued.Load() == 1 })
		release <- struct{}{}
		if r := <-first; r.status != fasthttp.StatusOK {
			t.Fatalf("the first request got %d %s", r.status, r.body)
		}
		if got := <-inDecode; got != "last" {
			t.Fatalf("the decode got %q after the first; want the last, not the one that left", got)
		}
		close(release)
		if r := <-last; r.status != fasthttp.StatusOK {
			t.Fatalf("the last request got %d %s", r.status, r.body)
		}
		if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "1" {
			t.Fatalf("got %q client_gone; want 1", got)
		}
	})
}

// A leg cancelled because its peer failed is also aborted on its worker,
// by the client's rid (a batch's first: one call a worker, see
// TestDroppedRequestAbortsOncePerWorker), so the worker frees it at once.
func TestCancelledLegIsAbortedByRID(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for body, aborts := range map[string]uint64{
			`{"text": "a", "rid": "request-7"}`:                       1,
			`{"text": ["a", "b"], "rid": ["request-7", "request-8"]}`: 1,
		} {
			h := newHarness(t)
			var served atomic.Int32
			decodeHasIt := make(chan struct{}, 1)
			h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
				<-decodeHasIt // fail only once the decode works on the request
				failing(&served, fasthttp.StatusServiceUnavailable, `{}`)(ctx)
			})
			h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second,
				OnRequest: func(path string, _ []byte) {
					if path == "/generate" {
						decodeHasIt <- struct{}{}
					}
				}})
			cfg := defaultConfig()
			cfg.DisableRetries = true
			srv := h.start(cfg)
			if r := h.post("/generate", body); r.status != fasthttp.StatusServiceUnavailable {
				t.Fatalf("%s: got %d %s", body, r.status, r.body)
			}
			waitIdle(t, srv) // includes the aborts
			// The aborted request ends on the decode soon after its answer to
			// the abort, on a goroutine of its own.
			synctest.Wait()
			st := h.decode.Stats()
			if st.AbortRequest != aborts || st.InFlight != 0 {
				t.Fatalf("%s: the decode got %d /abort_request and has %d in flight; want %d and 0", body, st.AbortRequest, st.InFlight, aborts)
			}
			if got := h.metric("pdlb_abort_requests_total"); got != strconv.FormatUint(aborts, 10) {
				t.Fatalf("%s: got pdlb_abort_requests_total %q; want %d", body, got, aborts)
			}
		}
	})
}

// A worker drops an idle keep-alive connection (uvicorn after 5 s) that
// pdlb still holds: the next request on it must not fail (sglang#9926). In
// memory and over TCP, where the request goes out inside the answer's
// first read (wire's worker connection), so the drop shows there.
func TestStaleConnectionsAreResent(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "tcp"}[tcp], func(t *testing.T) {
			h := newHarness(t)
			h.tcpWorkers = tcp
			p, d := h.pair(fake.Config{}, fake.Config{})
			cfg := defaultConfig()
			cfg.DisableRetries = true // the resend is not a retry
			h.start(cfg)
			for i := range 3 {
				for _, stream := range []string{"false", "true"} {
					if r := h.post("/generate", `{"text": "a", "stream": `+stream+`}`); r.status != fasthttp.StatusOK {
						t.Fatalf("round %d: got %d %s", i, r.status, r.body)
					}
					// Both workers drop every idle connection pdlb pooled.
					if p.CloseIdleConnections()+d.CloseIdleConnections() == 0 && i > 0 {
						t.Fatalf("no idle connection to drop: the test would prove nothing")
					}
				}
			}
			if got := h.metric("pdlb_backend_errors_total{role=\"decode\",backend=\"decode-0:30010\"}"); got != "0" {
				t.Fatalf("got %q decode errors", got)
			}
		})
	}
}

// A client that goes away while waiting for its answer gets both legs
// cancelled, once pdlb starts watching it: soon after its request, or long
// after, past the client timeouts (generations take minutes); and a stream's
// client before its first event (under load, that can take a while).
func TestClientGoneCancelsBothLegs(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		stream                   bool
		readTimeout, idleTimeout time.Duration
		leaveAfter               time.Duration
	}{
		{name: "soon"},
		{name: "after the client timeouts", readTimeout: 200 * time.Millisecond, idleTimeout: 300 * time.Millisecond,
			leaveAfter: wire.WatchAfter + time.Second},
		{name: "stream before its first event", stream: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				decodeHasIt := make(chan struct{}, 1)
				p, _ := h.pair(fake.Config{KVTimeout: 20 * time.Second}, fake.Config{KVTimeout: 20 * time.Second,
					OnRequest: func(path string, _ []byte) {
						if path == "/generate" {
							decodeHasIt <- struct{}{}
						}
					}})
				// The prefill holds the request: the decode waits for the KV cache.
				if err := p.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.SetFault(fake.Fault{}) })
				cfg := defaultConfig()
				cfg.ClientReadTimeout, cfg.ClientIdleTimeout = tc.readTimeout, tc.idleTimeout
				srv := h.start(cfg)
				conn, err := h.nw.Dial("pdlb:8000")
				if err != nil {
					t.Fatal(err)
				}
				sendRequest(t, conn, "/generate", `{"text": "a", "stream": `+strconv.FormatBool(tc.stream)+`}`)
				<-decodeHasIt
				<-time.After(tc.leaveAfter) // on the bubble's clock: no real time
				_ = conn.Close()
				waitIdleWithin(t, srv, wire.WatchAfter+2*time.Second)
				if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "1" {
					t.Fatalf("got %q client_gone; want 1", got)
				}
			})
		})
	}
}

// A client that shuts its writing side after its request counts as gone,
// as nginx counts it, but may still be reading: it must get no answer at
// all, not an empty 200 for a generation pdlb cancelled.
func TestHalfClosedClientGetsNoAnswer(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			h := newHarness(t)
			p, _ := h.pair(fake.Config{KVTimeout: 20 * time.Second}, fake.Config{KVTimeout: 20 * time.Second})
			if err := p.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.SetFault(fake.Fault{}) })
			srv := h.start(defaultConfig())
			conn, err := net.Dial("tcp", h.serveTCP(srv))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sendRequest(t, conn, "/generate", `{"text": "a", "stream": `+strconv.FormatBool(stream)+`}`)
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(wire.WatchAfter + 5*time.Second))
			got, err := io.ReadAll(conn)
			if err != nil || len(got) > 0 {
				t.Fatalf("got %q, %v; want the connection closed with no answer", got, err)
			}
			waitIdle(t, srv)
			if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "1" {
				t.Fatalf("got %q client_gone; want 1", got)
			}
		})
	}
}

// A prefill that has sent its KV cache but keeps its answer once its decode
// has answered is given up after orphanPrefillGrace, without counting
// against the prefill: the client has its answer, and nothing stays in
// flight.
func TestPrefillSilentAfterItsDecodeIsGivenUp(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{}, fake.Config{})
		if err := p.SetFault(fake.Fault{Kind: fake.FaultStall}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.SetFault(fake.Fault{}) })
		srv := h.start(defaultConfig())
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s; want the decode's answer", r.status, r.body)
		}
		waitIdleWithin(t, srv, orphanPrefillGrace+2*time.Second)
		if got := h.metric(`pdlb_backend_errors_total{role="prefill",backend="prefill-0:30000"}`); got != "0" {
			t.Fatalf("got %q prefill errors; want 0: pdlb gave up, the prefill did not fail", got)
		}
	})
}

// A decode that reports a failed KV transfer (its prefill died, or could
// not be reached from it) says the pair failed, not the decode alone: the
// retry must avoid that prefill as well, or it may pair the request with
// the same dead prefill again and use up its retries.
func TestKVTransferFailureAvoidsThePrefillOnRetry(t *testing.T) {
	const kvFailure = `Decode transfer failed for request rank=0 decode_req.req.rid='r' decode_req.req.bootstrap_room=1 ` +
		`with exception KVTransferError(bootstrap_room=1): Lost connection with prefill instance (bootstrap_addr: prefill-0:8998)`
	for _, mode := range []string{"buffered", "stream answered 500", "stream with an error event"} {
		t.Run(mode, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				for _, addr := range []string{"prefill-0:30000", "prefill-1:30000"} {
					h.backend(addr, func(ctx *fasthttp.RequestCtx) {
						ctx.SetContentType("application/json")
						ctx.SetBodyString(`{"text": ""}`)
					})
				}
				// The decode sees every attempt (a prefill leg may be cancelled
				// before it is sent): it counts those paired with prefill-0.
				var mu sync.Mutex
				seen := map[string]int{} // request ID -> attempts paired with prefill-0
				h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
					if gjson.GetBytes(ctx.PostBody(), "bootstrap_host").String() != "prefill-0" {
						ctx.SetContentType("application/json")
						ctx.SetBodyString(`{"text": "ok"}`)
						return
					}
					mu.Lock()
					seen[string(ctx.Request.Header.Peek("X-Request-Id"))]++
					mu.Unlock()
					if mode == "stream with an error event" {
						ctx.SetContentType("text/event-stream")
						ctx.SetBodyString(`data: {"error": {"message": "` + kvFailure + `", "code": 500}}` + "\n\ndata: [DONE]\n\n")
						return
					}
					ctx.SetStatusCode(fasthttp.StatusInternalServerError)
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"error": {"message": "` + kvFailure + `"}}`)
				})
				cfg := defaultConfig()
				cfg.Prefill = []PrefillSpec{{URL: "http://prefill-0:30000", BootstrapPort: 8998}, {URL: "http://prefill-1:30000", BootstrapPort: 8998}}
				cfg.PrefillPolicy = PolicyRandom
				cfg.Breaker.Disable = true // the decode's failures are the pair's
				h.start(cfg)
				h.waitFirstReads()
				stream := map[bool]string{false: "false", true: "true"}[mode != "buffered"]
				for i := range 30 {
					id := "req-" + strconv.Itoa(i)
					if r := h.post("/generate", `{"text": "a", "stream": `+stream+`}`, "X-Request-Id", id); r.status != fasthttp.StatusOK {
						t.Fatalf("request %d: got %d %s; want the retry's answer", i, r.status, r.body)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for id, n := range seen {
					if n > 1 {
						t.Fatalf("%s was paired with prefill-0 %d times: the retry did not avoid the prefill whose transfer failed", id, n)
					}
				}
				if len(seen) == 0 {
					t.Fatal("no request went to prefill-0: the test proves nothing")
				}
			})
		})
	}
}

// A worker's breaker counts failed requests, not attempts: a request that
// fails on the only decode, then again on its retries there, counts once,
// so two bad requests do not eject it and turn every client away.
func TestRetriesOnTheSameWorkerCountOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
		var attempts atomic.Int32
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			if gjson.GetBytes(ctx.PostBody(), "text").String() == "bad" {
				attempts.Add(1)
				ctx.SetStatusCode(fasthttp.StatusInternalServerError)
				ctx.SetBodyString(`{"error": "boom"}`)
				return
			}
			ctx.SetBodyString(`{"text": "ok"}`)
		})
		cfg := defaultConfig()
		cfg.Breaker.Threshold = 5
		h.start(cfg)
		for range 2 {
			if r := h.post("/generate", `{"text": "bad"}`); r.status != fasthttp.StatusInternalServerError || !strings.Contains(string(r.body), "boom") {
				t.Fatalf("a bad request got %d %s; want the decode's 500", r.status, r.body)
			}
		}
		if got := attempts.Load(); got != 6 {
			t.Fatalf("the decode got %d attempts of the bad requests; want 3 each", got)
		}
		if r := h.post("/generate", `{"text": "good"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("a good request got %d %s; want 200 from the decode still in selection", r.status, r.body)
		}
	})
}

// When a failure takes the last worker of its pool out (its breaker), the
// client gets that failure, not a 503 saying no worker is left.
func TestFailureThatEjectsTheLastWorkerIsAnswered(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
		var attempts atomic.Int32
		h.backend("decode-0:30010", failing(&attempts, fasthttp.StatusInternalServerError, `{"error": "boom"}`))
		cfg := defaultConfig()
		cfg.Breaker.Threshold = 1
		h.start(cfg)
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusInternalServerError || !strings.Contains(string(r.body), "boom") {
			t.Fatalf("got %d %s; want the decode's 500", r.status, r.body)
		}
		if got := attempts.Load(); got != 1 {
			t.Fatalf("the decode got %d attempts; want 1, its failure having ejected it", got)
		}
	})
}

// A decode whose KV transfer from a prefill failed has pdlb read that
// prefill's bootstrap server again at once: it may have restarted with
// another bootstrap port, which the registry's next round (an hour here)
// would learn too late for the requests in between.
func TestKVTransferFailureRereadsThePrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{BootstrapPort: 8998}, fake.Config{KVTimeout: 300 * time.Millisecond})
		cfg := defaultConfig()
		cfg.Prefill = []PrefillSpec{{URL: "http://prefill-0:30000"}} // port learned from /server_info
		cfg.BootstrapRefresh = time.Hour
		srv := h.start(cfg)
		h.waitBootstrap()
		_ = p.Close()
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 9100, KVTimeout: time.Second})
		_, _ = h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`)
		waitFor(t, "the registry to learn the new bootstrap port", func() bool { return srv.registry.State(0).Port == 9100 })
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
}

// A prefill shut down while it holds requests ends them with an abort that
// has no status, in a 200 (as SGLang answers an /abort_request, and the
// fake does when SIGTERM stops it): that is the prefill's failure, and the
// request goes to another one. It went to the client as its answer.
func TestPrefillShutDownMidRequestIsRetriedElsewhere(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.backend("prefill-1:30000", jsonBackend(`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Aborted by AbortReq.","status_code":null}}}`))
		cfg := defaultConfig()
		cfg.Prefill = []PrefillSpec{{URL: "http://prefill-1:30000", BootstrapPort: 8999}, cfg.Prefill[0]}
		cfg.PrefillPolicy = PolicyRoundRobin // the first attempt goes to prefill-1
		h.start(cfg)
		h.waitFirstReads()
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "meta_info.finish_reason.type").String() == "abort" {
			t.Fatalf("got %d %s; want the other prefill's pair's answer", r.status, r.body)
		}
		if got := h.metric("pdlb_retries_total"); got != "1" {
			t.Fatalf("got pdlb_retries_total %q; want 1", got)
		}
	})
}
