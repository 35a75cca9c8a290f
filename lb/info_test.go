package lb

import (
	"context"
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
	"pdlb/health"
)

func TestHealth(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.start(defaultConfig()) // no backend at all: /health must not contact them
		r := h.do(fasthttp.MethodGet, "/health", "")
		if r.status != fasthttp.StatusOK || len(r.body) != 0 {
			t.Fatalf("got %d %q; want an empty 200", r.status, r.body)
		}
	})
}

func TestHealthGenerateReportsEachBackend(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.Decode = append(cfg.Decode, "http://decode-1:30010") // nobody listens there
		h.start(cfg)
		r := h.do(fasthttp.MethodGet, "/health_generate", "")
		if r.status != fasthttp.StatusServiceUnavailable {
			t.Fatalf("got %d %s; want 503, since one decode is down", r.status, r.body)
		}
		backends := gjson.GetBytes(r.body, "backends").Array()
		if len(backends) != 3 {
			t.Fatalf("got %s; want a line per backend", r.body)
		}
		if s := backends[0].Get("status").Int(); s != 200 || backends[0].Get("role").String() != "prefill" {
			t.Fatalf("got prefill line %s", backends[0].Raw)
		}
		if e := backends[2].Get("error").String(); !strings.Contains(e, "decode-1:30010") {
			t.Fatalf("got decode-1 line %s; want its error", backends[2].Raw)
		}

		h2 := newHarness(t)
		h2.pair(fake.Config{}, fake.Config{})
		h2.start(defaultConfig())
		if r := h2.do(fasthttp.MethodGet, "/health_generate", ""); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s with every backend up; want 200", r.status, r.body)
		}
	})
}

func TestFlushCacheForwardsTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)
		r := h.post("/flush_cache?timeout=2.5", "")
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		for _, s := range []*fake.Server{p, d} {
			if st := s.Stats(); st.FlushCache != 1 || st.FlushCacheTimeout != "2.5" {
				t.Fatalf("got %d flushes with timeout %q; want 1 with 2.5", st.FlushCache, st.FlushCacheTimeout)
			}
		}
		// Not a number, or one pdlb would wait on for ever (or overflow).
		for _, bad := range []string{"soon", "inf", "NaN", "1e300", "-1", "3601"} {
			if r := h.post("/flush_cache?timeout="+bad, ""); r.status != fasthttp.StatusBadRequest ||
				!strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "from 0 to 3600") {
				t.Fatalf("timeout=%s: got %d %s; want a 400 giving the range", bad, r.status, r.body)
			}
		}
		if st := p.Stats(); st.FlushCache != 1 {
			t.Fatalf("got %d flushes; the bad timeouts must not reach the workers", st.FlushCache)
		}
	})
}

// A worker that will not flush while requests run answers 400, as SGLang
// does; pdlb passes that refusal on, with each worker's status, rather
// than calling it a gateway failure.
func TestFlushCacheRefusedWhileRequestsRun(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		p, d := h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)
		done := make(chan reply, 1)
		go func() { done <- h.post("/generate", `{"text": "a", "sampling_params": {"max_new_tokens": 1}}`) }()
		waitFor(t, "the request to run on the decode alone", func() bool { return d.Stats().InFlight == 1 && p.Stats().InFlight == 0 })

		r := h.post("/flush_cache", "")
		if r.status != fasthttp.StatusBadRequest || gjson.GetBytes(r.body, "error.code").Int() != 400 ||
			gjson.GetBytes(r.body, "error.message").String() != "1 of 2 backends refused /flush_cache" {
			t.Fatalf("got %d %s while a request runs; want the decode's 400, told as a refusal", r.status, r.body)
		}
		if got := h.metric(`pdlb_request_errors_total{reason="backend_failed"}`); got != "" && got != "0" {
			t.Fatalf("got %s backend_failed; want a refusal not counted as a failure", got)
		}
		statuses := gjson.GetBytes(r.body, `backends.#.status`).String()
		if statuses != "[200,400]" {
			t.Fatalf("got backend statuses %s; want the prefill's 200 and the decode's 400", statuses)
		}

		// With a timeout, the workers wait for the request to end, then flush.
		flushed := make(chan reply, 1)
		go func() { flushed <- h.post("/flush_cache?timeout=10", "") }()
		waitFor(t, "the second flush to reach the decode", func() bool { return d.Stats().FlushCache == 2 })
		gate <- struct{}{}
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Fatalf("the request got %d %s", r.status, r.body)
		}
		if r := <-flushed; r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s once the request ended; want 200", r.status, r.body)
		}
	})
}

func TestServerInfoAggregates(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{DPSize: 2}, fake.Config{DPSize: 2})
		h.start(defaultConfig())
		for _, path := range []string{"/server_info", "/get_server_info"} {
			r := h.do(fasthttp.MethodGet, path, "")
			if r.status != fasthttp.StatusOK || !gjson.ValidBytes(r.body) {
				t.Fatalf("%s: got %d %s", path, r.status, r.body)
			}
			if n := len(gjson.GetBytes(r.body, "internal_states").Array()); n != 2 {
				t.Fatalf("%s: got %d internal states; want the decode's 2: %s", path, n, r.body)
			}
			if m := gjson.GetBytes(r.body, "prefill.0.disaggregation_mode").String(); m != "prefill" {
				t.Fatalf("%s: got prefill info %s", path, gjson.GetBytes(r.body, "prefill").Raw)
			}
			if m := gjson.GetBytes(r.body, "decode.0.disaggregation_mode").String(); m != "decode" {
				t.Fatalf("%s: got decode info %s", path, gjson.GetBytes(r.body, "decode").Raw)
			}
		}
	})
}

func TestServerInfoWithADeadDecode(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill})
		h.start(defaultConfig())
		r := h.do(fasthttp.MethodGet, "/server_info", "")
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		// mini_lb's placeholder when no decode reports states.
		if s := gjson.GetBytes(r.body, "internal_states").Raw; s != `[{"last_gen_throughput":0.0,"avg_spec_accept_length":null}]` {
			t.Fatalf("got internal_states %s", s)
		}
		if e := gjson.GetBytes(r.body, "decode.0.error").String(); !strings.Contains(e, "decode-0:30010") {
			t.Fatalf("got decode list %s; want the failure", gjson.GetBytes(r.body, "decode").Raw)
		}
	})
}

func TestModelInfoComesFromAPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, Model: "the-model", BootstrapPort: 8999})
		cfg := defaultConfig()
		// The first prefill is down: the next one answers.
		cfg.Prefill = append(cfg.Prefill, PrefillSpec{URL: "http://prefill-1:30000", BootstrapPort: 8999})
		h.start(cfg)
		for _, path := range []string{"/model_info", "/get_model_info"} {
			if r := h.do(fasthttp.MethodGet, path, ""); r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "model_path").String() != "the-model" {
				t.Fatalf("%s: got %d %s", path, r.status, r.body)
			}
		}
		r := h.do(fasthttp.MethodGet, "/v1/models", "")
		if r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "data.0.id").String() != "the-model" {
			t.Fatalf("/v1/models: got %d %s", r.status, r.body)
		}
	})
}

// A worker that health checks find down is not asked on the info and
// control routes: hung, it would hold each of them for controlTimeout. The
// answers say it is down.
func TestControlRoutesSkipWorkersMarkedDown(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var asked atomic.Int32
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			asked.Add(1)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{}`)
		})
		h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, Model: "the-model", BootstrapPort: 8999})
		h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode})
		cfg := defaultConfig()
		cfg.Prefill = append(cfg.Prefill, PrefillSpec{URL: "http://prefill-1:30000", BootstrapPort: 8999})
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		srv := h.start(cfg)
		srv.prefills.backends()[0].health.Store(int32(health.Down))
		for _, c := range []struct {
			method, path string
			status       int
			down         string // where the answer says prefill-0 is down
		}{
			{"GET", "/v1/models", fasthttp.StatusOK, ""},
			{"GET", "/model_info", fasthttp.StatusOK, ""},
			{"GET", "/health_generate", fasthttp.StatusServiceUnavailable, "backends.0.error"},
			{"GET", "/server_info", fasthttp.StatusOK, "prefill.0.error"},
			{"POST", "/flush_cache", fasthttp.StatusBadGateway, "backends.0.error"},
		} {
			r := h.do(c.method, c.path, "")
			if r.status != c.status || c.down != "" && !strings.Contains(gjson.GetBytes(r.body, c.down).String(), "down by its health checks") {
				t.Errorf("%s %s: got %d %s; want %d, saying prefill-0 is down", c.method, c.path, r.status, r.body, c.status)
			}
		}
		if n := asked.Load(); n != 0 {
			t.Fatalf("the prefill marked down was asked %d times", n)
		}
		// With no prefill up, the info routes say so at once.
		srv.prefills.backends()[1].health.Store(int32(health.Down))
		if r := h.do("GET", "/v1/models", ""); r.status != fasthttp.StatusServiceUnavailable ||
			!strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "down by its health checks") {
			t.Fatalf("/v1/models with every prefill down: got %d %s; want a 503 saying so", r.status, r.body)
		}
	})
}

// POST /abort_request goes to every worker with the client's body, as the
// newest mini_lb does: a request pdlb serves, named by its rid, ends on
// both legs, and the client gets the abort's answer.
func TestAbortRequestReachesEveryWorker(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		p, d := h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		srv := h.start(cfg)
		got := make(chan reply, 1)
		go func() {
			got <- h.post("/generate", `{"text": "a", "rid": "request-1", "sampling_params": {"max_new_tokens": 4}}`)
		}()
		// Generating: past its KV transfer, held by the token gate.
		waitFor(t, "the decode to hold the request", func() bool { st := d.Stats(); return st.InFlight == 1 && st.KVTransfersOK == 1 })
		if r := h.post("/abort_request", `{"rid": "request-1"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("/abort_request: got %d %s", r.status, r.body)
		}
		r := <-got
		if reason := gjson.GetBytes(r.body, "meta_info.finish_reason.type").String(); r.status != fasthttp.StatusOK || reason != "abort" {
			t.Fatalf("the aborted request got %d %s; want the decode's abort", r.status, r.body)
		}
		if pa, da := p.Stats().AbortRequest, d.Stats().AbortRequest; pa != 1 || da != 1 {
			t.Fatalf("the prefill and decode got %d and %d /abort_request; want 1 each", pa, da)
		}
		waitIdle(t, srv)
		// A body a worker refuses is the workers' refusal, passed on.
		if r := h.post("/abort_request", `not json`); r.status != fasthttp.StatusBadRequest {
			t.Fatalf("a bad body: got %d %s; want the workers' 400", r.status, r.body)
		}
	})
}

// A request aborted through pdlb while its decode waits for the KV cache
// gets the decode's abort, which reads as a failed KV transfer, and is not
// tried again on a fresh pair: that would undo the abort.
func TestAbortedRequestIsNotRetried(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{PrefillDelay: time.Minute}, fake.Config{})
		srv := h.start(defaultConfig())
		got := make(chan reply, 1)
		go func() {
			got <- h.post("/generate", `{"text": "a", "rid": "request-1"}`)
		}()
		// Both legs have the request: the prefill spends its delay on it, the
		// decode waits for its KV cache.
		waitFor(t, "both workers to hold the request", func() bool { return p.Stats().InFlight == 1 && d.Stats().InFlight == 1 })
		if r := h.post("/abort_request", `{"rid": "request-1"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("/abort_request: got %d %s", r.status, r.body)
		}
		// The prefill's abort or the decode's, whichever pdlb heard first.
		if r := <-got; !strings.Contains(gjson.GetBytes(r.body, "meta_info.finish_reason.message").String(), "Aborted by AbortReq") {
			t.Fatalf("the aborted request got %d %s; want a worker's abort", r.status, r.body)
		}
		if pg, dg := p.Stats().GenerateRequests, d.Stats().GenerateRequests; pg != 1 || dg != 1 {
			t.Fatalf("the prefill and decode got %d and %d requests; want 1 each, no retry", pg, dg)
		}
		waitIdleWithin(t, srv, 5*time.Second)
	})
}

func TestModelInfoWithNoPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.start(defaultConfig())
		r := h.do(fasthttp.MethodGet, "/v1/models", "")
		if r.status != fasthttp.StatusBadGateway || !strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "prefill-0:30000") {
			t.Fatalf("got %d %s; want a 502 naming the prefill", r.status, r.body)
		}
	})
}

func TestMetrics(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		srv := h.start(defaultConfig())
		h.post("/generate", `{"text": "a"}`)
		h.post("/generate", `not json`)
		h.openStream("/generate", `{"text": "a", "stream": true}`).rest()
		waitIdle(t, srv) // a stream is counted once it is over
		r := h.do(fasthttp.MethodGet, "/metrics", "")
		for _, want := range []string{
			`pdlb_requests_total{route="/generate",code="200"} 2`,
			`pdlb_requests_total{route="/generate",code="400"} 1`,
			`pdlb_request_errors_total{reason="invalid_request"} 1`,
			`pdlb_backend_requests_total{role="prefill",backend="prefill-0:30000"} 2`,
			`pdlb_backend_inflight{role="decode",backend="decode-0:30010"} 0`,
			`pdlb_stream_first_byte_seconds_count{route="/generate"} 1`,
			`pdlb_request_duration_seconds_count{route="/generate"} 3`,
			`process_resident_memory_bytes`,
		} {
			if !strings.Contains(string(r.body), want) {
				t.Fatalf("/metrics lacks %q:\n%s", want, r.body)
			}
		}
	})
}

// A prefill given without a bootstrap port gets the one its /server_info
// reports.
func TestBootstrapPortIsLearned(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var db bodies
		h.pair(fake.Config{BootstrapPort: 9123, BootstrapAddr: "prefill-0:9123"}, fake.Config{OnRequest: db.record})
		cfg := defaultConfig()
		cfg.Prefill[0].BootstrapPort = 0
		srv := h.start(cfg)
		if err := srv.registry.Refresh(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		if st := srv.registry.State(0); st.Port != 9123 || st.PortSource != "server_info" {
			t.Fatalf("got bootstrap port %d from %s; want 9123 from server_info", st.Port, st.PortSource)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if port := gjson.GetBytes(db.only(t), "bootstrap_port").Raw; port != "9123" {
			t.Fatalf("got bootstrap_port %s; want 9123", port)
		}
	})
}

// Until a port is known, requests carry null, as with mini_lb: each worker
// then uses its own.
func TestUnknownBootstrapPortIsNull(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		got := make(chan string, 2)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/server_info" {
				ctx.SetBodyString(`{"disaggregation_mode": "prefill"}`)
				return
			}
			got <- gjson.GetBytes(ctx.PostBody(), "bootstrap_port").Raw
			ctx.SetBodyString(`{}`)
		})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
		cfg := defaultConfig()
		cfg.Prefill[0].BootstrapPort = 0
		srv := h.start(cfg)
		if err := srv.registry.Refresh(context.Background(), 0); err == nil {
			t.Fatalf("the registry reached a bootstrap server that does not exist")
		}
		h.post("/generate", `{"text": "a"}`)
		if port := <-got; port != "null" {
			t.Fatalf("got bootstrap_port %s; want null", port)
		}
	})
}

func TestAdminListener(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, pprof := range []bool{false, true} {
			h := newHarness(t)
			srv := h.start(defaultConfig())
			ln, err := h.nw.Listen("admin:6060")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.ServeAdmin(ln, pprof) }()
			cl := &fasthttp.HostClient{Addr: "admin:6060", Dial: h.nw.Dial}
			get := func(path string) int {
				t.Helper()
				status, _, err := cl.Get(nil, "http://admin:6060"+path)
				if err != nil {
					t.Fatal(err)
				}
				return status
			}
			if got := get("/metrics"); got != fasthttp.StatusOK {
				t.Fatalf("got /metrics %d", got)
			}
			// The probes, outside the client connection budget.
			if got := get("/liveness"); got != fasthttp.StatusOK {
				t.Errorf("got /liveness %d; want 200", got)
			}
			if got := get("/readiness"); got != fasthttp.StatusOK {
				t.Errorf("got /readiness %d; want 200", got)
			}
			want := fasthttp.StatusNotFound
			if pprof {
				want = fasthttp.StatusOK
			}
			if got := get("/debug/pprof/"); got != want {
				t.Fatalf("pprof %v: got /debug/pprof/ %d; want %d", pprof, got, want)
			}
			cl.CloseIdleConnections()
		}
	})
}

// SGLang's decode answers an abort that reaches it during the KV transfer
// as a failure with status 500, as a stream's first event or as the
// answer. Such answers to /abort_request are the client's wish: a stream is
// not retried, and neither counts against the decode, which five of them
// used to eject.
func TestClientAbortsAreNoWorkerFailures(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		abortedStream := `data: {"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "Decode transfer failed for request rid='r-1' with exception KVTransferError(bootstrap_room=1): Aborted by AbortReq.", "status_code": 500}}}` + "\n\ndata: [DONE]\n\n"
		abortedAnswer := `{"error": {"message": "Decode transfer failed ... KVTransferError(bootstrap_room=1): Aborted by AbortReq.", "code": 500}}`
		for _, stream := range []bool{false, true} {
			h := newHarness(t)
			abortSeen := make(chan struct{})
			var aborted atomic.Bool
			var held, calls atomic.Int32
			h.backend("prefill-0:30000", jsonBackend(`{"text": ""}`))
			h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
				if string(ctx.Path()) == "/abort_request" {
					if aborted.CompareAndSwap(false, true) {
						close(abortSeen)
					}
					return
				}
				calls.Add(1)
				if aborted.Load() {
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"text": "ok"}`)
					return
				}
				held.Add(1)
				<-abortSeen
				if stream {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyString(abortedStream)
					return
				}
				ctx.SetStatusCode(fasthttp.StatusInternalServerError)
				ctx.SetContentType("application/json")
				ctx.SetBodyString(abortedAnswer)
			})
			cfg := defaultConfig()
			cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
			srv := h.start(cfg)
			var wg sync.WaitGroup
			for i := range 5 {
				wg.Go(func() {
					h.post("/generate", `{"text": "a", "rid": "request-`+strconv.Itoa(i)+`", "stream": `+strconv.FormatBool(stream)+`}`)
				})
			}
			waitFor(t, "the decode to hold them", func() bool { return held.Load() == 5 })
			if r := h.post("/abort_request", `{"abort_all": true}`); r.status != fasthttp.StatusOK {
				t.Fatalf("/abort_request: got %d %s", r.status, r.body)
			}
			wg.Wait()
			waitIdle(t, srv)
			if n := calls.Load(); n != 5 {
				t.Fatalf("stream %v: the decode got %d requests; want the 5 aborted, none retried", stream, n)
			}
			if got := h.metric(`pdlb_request_errors_total{reason="backend_failed"}`); got != "0" {
				t.Fatalf("stream %v: got backend_failed %q; want 0", stream, got)
			}
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
				t.Fatalf("stream %v: a request after the aborts got %d %s; want 200 from the healthy decode", stream, r.status, r.body)
			}
		}
	})
}

// /server_info sorts the answers by each one's worker, whatever the pools
// became while it asked them: a decode added meanwhile used to shift the
// split of prefills and decodes, which panicked (slice bounds) or put a
// prefill's answer among the decodes'.
func TestServerInfoWhilePoolsChange(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode})
		silent, err := h.nw.Listen("silent:30010") // accepts, never answers
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				held <- c
			}
		}()
		t.Cleanup(func() { _ = silent.Close() })
		srv := h.start(defaultConfig())
		if _, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://silent:30010"}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		done := make(chan reply, 1)
		go func() { // longer than tryDo waits: the silent decode takes controlTimeout
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("http://pdlb:8000/server_info")
			err := h.cl.DoTimeout(req, resp, 2*controlTimeout)
			done <- reply{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...)}
			if err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait() // it waits for the silent decode
		if _, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010"}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		time.Sleep(controlTimeout) // the bubble's clock: the silent one times out
		r := <-done
		if r.status != fasthttp.StatusBadGateway && r.status != fasthttp.StatusOK {
			t.Fatalf("/server_info: got %d %s", r.status, r.body)
		}
		prefills, decodes := gjson.GetBytes(r.body, "prefill").Array(), gjson.GetBytes(r.body, "decode").Array()
		if len(prefills) != 1 || len(decodes) != 2 || gjson.GetBytes(r.body, `decode.#(disaggregation_mode=="prefill")`).Exists() {
			t.Errorf("/server_info: got prefills %s, decodes %s; want 1 prefill and the 2 decodes asked, each in its list", prefills, decodes)
		}
	})
}
