package lb

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// seedRequest is the first request of the report behind SGLang PR #22990:
// through mini_lb it fails on a freshly started affected decode.
const seedRequest = `{"text": "Hello World How are you?", "sampling_params": {"max_new_tokens": 128, "temperature": 0.0}, "stream": false, "routed_dp_rank": 0, "disagg_prefill_dp_rank": 0}`

// dpPair starts the seed's topology: a prefill and a decode with --dp 4,
// the decode affected by the first-request bug.
func (h *harness) dpPair() (p, d *fake.Server) {
	h.t.Helper()
	return h.pair(fake.Config{DPSize: 4, Tokens: 4}, fake.Config{DPSize: 4, Tokens: 4, FirstRequestBug: true})
}

// warmDPPair starts pdlb with --prefill-dp-policy policy in front of
// dpPair, and returns once the pair is warm.
func (h *harness) warmDPPair(policy string) (p, d *fake.Server) {
	h.t.Helper()
	p, d = h.dpPair()
	cfg := warmConfig()
	cfg.PrefillDPPolicy = policy
	h.start(cfg)
	// Once the seed request is answered, the warm-up is over.
	if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
		h.t.Fatalf("got %d %s", r.status, r.body)
	}
	return p, d
}

func TestSeedRequestFailsWithoutWarmup(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.dpPair()
		cfg := defaultConfig()
		cfg.DisableRetries = true // a plain pairing, as mini_lb's
		h.start(cfg)
		r := h.post("/generate", seedRequest)
		if r.status != fasthttp.StatusInternalServerError || !strings.Contains(string(r.body), "is healthy before, but now it is down") {
			t.Fatalf("got %d %s; want the decode's first-request failure, as through mini_lb", r.status, r.body)
		}
		if n := d.Stats().FirstRequestFailures; n != 1 {
			t.Fatalf("the decode counted %d first-request failures; want 1", n)
		}
	})
}

func TestSeedRequestSucceedsFirstTime(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			h := newHarness(t)
			_, d := h.dpPair()
			h.start(warmConfig())
			body := seedRequest
			if stream {
				body = strings.Replace(body, `"stream": false`, `"stream": true`, 1)
				s := h.openStream("/generate", body)
				if events := append([]string{s.next()}, s.rest()...); s.status != fasthttp.StatusOK || events[len(events)-1] != "data: [DONE]\n\n" {
					t.Fatalf("got %d %q", s.status, events)
				}
			} else if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s; want the seed request to succeed the first time", r.status, r.body)
			}
			if n := d.Stats().FirstRequestFailures; n != 0 {
				t.Fatalf("the decode failed %d requests; the warm-up must come first", n)
			}
		}
	})
}

// A decode that restarts has empty caches again while pdlb runs on: the
// seed request must still succeed.
func TestSeedRequestSucceedsAfterDecodeRestart(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.dpPair()
		h.start(warmConfig())
		if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
			t.Fatalf("before the restart: got %d %s", r.status, r.body)
		}
		for round := range 2 {
			if err := h.decode.Close(); err != nil {
				t.Fatal(err)
			}
			h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true, KVTimeout: 5 * time.Second})
			if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
				t.Fatalf("after restart %d: got %d %s", round+1, r.status, r.body)
			}
		}
	})
}

func TestPrefillDPRankOutOfRange(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.dpPair()
		h.start(warmConfig())
		h.post("/generate", seedRequest) // the pair is warm from here on
		served := p.Stats().GenerateRequests + d.Stats().GenerateRequests
		for _, rank := range []string{"4", "-1", "99"} {
			r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": `+rank+`}`)
			msg := gjson.GetBytes(r.body, "error.message").String()
			if r.status != fasthttp.StatusBadRequest || !strings.Contains(msg, "disagg_prefill_dp_rank="+rank+" out of range [0, ") {
				t.Fatalf("rank %s: got %d %s; want a 400 naming the range", rank, r.status, r.body)
			}
			if !strings.Contains(msg, "[0, 4)") {
				t.Fatalf("rank %s: got %q; want the range [0, 4)", rank, msg)
			}
		}
		r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": "zero"}`)
		if r.status != fasthttp.StatusBadRequest || !strings.Contains(string(r.body), "must be an integer rank") {
			t.Fatalf("got %d %s; want a 400 for a non-integer rank", r.status, r.body)
		}
		if n := p.Stats().GenerateRequests + d.Stats().GenerateRequests - served; n != 0 {
			t.Fatalf("%d bad requests reached the workers", n)
		}
	})
}

func TestPrefillDPPolicySharesRanks(t *testing.T) {
	for _, policy := range []string{DPPolicyRoundRobin, DPPolicyLeastInflight} {
		t.Run(policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				p, d := h.warmDPPair(policy)
				before := p.Stats().RankRequests
				for range 40 {
					if r := h.post("/v1/completions", `{"prompt": "a", "max_tokens": 2}`); r.status != fasthttp.StatusOK {
						t.Fatalf("got %d %s", r.status, r.body)
					}
				}
				after := p.Stats().RankRequests
				for rank := range after {
					got := after[rank] - before[rank]
					// least_inflight may skip a rank whose prefill call is
					// still finishing when the next request comes.
					if policy == DPPolicyRoundRobin && got != 10 || got == 0 {
						t.Fatalf("prefill rank %d served %d of 40 requests (%v → %v)", rank, got, before, after)
					}
				}
				if n := p.Stats().DPConflicts + d.Stats().FirstRequestFailures; n != 0 {
					t.Fatalf("%d conflicts or first-request failures", n)
				}
			})
		})
	}
}

// A client's own routed_dp_rank reaches both workers as with mini_lb, but the
// room is drawn to match it, so the prefill finds no conflict.
func TestClientRoutedDPRankGetsAMatchingRoom(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.dpPair()
		h.start(warmConfig())
		h.waitBootstrap()
		for range 8 {
			if r := h.post("/generate", `{"text": "a", "routed_dp_rank": 2}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if n := p.Stats().DPConflicts; n != 0 {
			t.Fatalf("%d follow_bootstrap_room conflicts", n)
		}
	})
}

// An X-Data-Parallel-Rank header is routed_dp_rank on the OpenAI routes:
// the room is drawn to match it as for the body field; when pdlb picks the
// prefill's rank itself, the prefill's header says that rank; and a header
// that is not an integer gets a 400 from pdlb.
func TestDPRankHeader(t *testing.T) {
	for _, policy := range []string{DPPolicyOff, DPPolicyRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				p, d := h.warmDPPair(policy)
				before := p.Stats().RankRequests
				for range 8 {
					r := h.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}]}`, "X-Data-Parallel-Rank", "2")
					if r.status != fasthttp.StatusOK {
						t.Fatalf("got %d %s", r.status, r.body)
					}
				}
				if n := p.Stats().DPConflicts + d.Stats().FirstRequestFailures; n != 0 {
					t.Fatalf("%d conflicts or first-request failures", n)
				}
				after := p.Stats().RankRequests
				if got := after[2] - before[2]; policy == DPPolicyOff && got != 8 {
					t.Fatalf("prefill rank 2 served %d of 8 requests (%v → %v); want all, as the header asks", got, before, after)
				}
				if got := after[0] - before[0]; policy == DPPolicyRoundRobin && got == 0 {
					t.Fatalf("prefill rank 0 served none of 8 (%v → %v); want the policy's ranks", before, after)
				}
			})
		})
	}
	h := newHarness(t)
	h.dpPair()
	h.start(defaultConfig())
	r := h.post("/v1/completions", `{"prompt": "a"}`, "X-Data-Parallel-Rank", "two")
	if r.status != fasthttp.StatusBadRequest || !strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "X-Data-Parallel-Rank") {
		t.Fatalf("got %d %s; want a 400 naming the header", r.status, r.body)
	}
}

func TestBootstrapRoute(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.dpPair()
		cfg := warmConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)
		h.post("/generate", seedRequest) // waits for the pair to be warm
		r := h.do(fasthttp.MethodGet, "/bootstrap", "")
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		p := gjson.GetBytes(r.body, "prefills.0")
		if !p.Get("ready").Bool() || p.Get("info.dp_size").Int() != 4 || len(p.Get("ranks").Array()) != 4 ||
			p.Get("port").Int() != 8998 || p.Get("port_source").String() != "cli" || p.Get("ranks.3.rank_port").Int() == 0 {
			t.Fatalf("got %s", p.Raw)
		}
		if pr := p.Get("pairs.0"); pr.Get("decode").String() != "http://decode-0:30010" || !pr.Get("warm").Bool() {
			t.Fatalf("got pair %s; want the warm pair", pr.Raw)
		}
		m := h.do(fasthttp.MethodGet, "/metrics", "")
		for _, want := range []string{`pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`, `pdlb_warmups_total{result="ok"} 1`, `pdlb_warm_pairs 1`} {
			if !strings.Contains(string(m.body), want) {
				t.Fatalf("/metrics lacks %q", want)
			}
		}
	})
}

func TestLeastInflightPicksTheIdlestRank(t *testing.T) {
	s := &Server{cfg: Config{PrefillDPPolicy: DPPolicyLeastInflight}}
	l := &rankLoad{inflight: make([]atomic.Int32, 4)}
	for r, n := range []int32{3, 1, 0, 2} {
		l.inflight[r].Store(n)
	}
	for range 8 {
		if r := s.pickRank(l, nil); r != 2 {
			t.Fatalf("picked rank %d; want 2, the idlest", r)
		}
	}
	l.inflight[2].Store(5)
	if r := s.pickRank(l, nil); r != 1 {
		t.Fatalf("picked rank %d; want 1", r)
	}
}

// Requests that wait for a pair share its one warm-up.
func TestWarmupIsSingleFlight(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.dpPair()
		h.start(warmConfig())
		const clients = 8
		done := make(chan int, clients)
		for range clients {
			go func() {
				r, _ := h.tryDo(fasthttp.MethodPost, "/generate", seedRequest)
				done <- r.status // 0 on an error
			}()
		}
		for range clients {
			if status := <-done; status != fasthttp.StatusOK {
				t.Fatalf("got status %d", status)
			}
		}
		// One warm-up generation per decode DP rank, then the clients'.
		if got := d.Stats().GenerateRequests; got != clients+4 {
			t.Fatalf("the decode served %d generations; want %d", got, clients+4)
		}
	})
}

// A pair that cannot be warmed gives a clear 503, not a hang.
func TestUnwarmablePairGives503(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{DPSize: 4, RegisterDelay: time.Hour}, fake.Config{DPSize: 4, FirstRequestBug: true})
		cfg := warmConfig()
		cfg.WarmupTimeout = 300 * time.Millisecond
		h.start(cfg)
		r := h.post("/generate", seedRequest)
		msg := gjson.GetBytes(r.body, "error.message").String()
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(msg, "prefill-0:30000") || !strings.Contains(msg, "not fully registered") {
			t.Fatalf("got %d %s; want a 503 saying why the pair is not warm", r.status, r.body)
		}
		if r.took > 3*time.Second {
			t.Fatalf("the client waited %s", r.took)
		}
	})
}

// A request carrying disagg_prefill_dp_rank waits for its pair's warm-up,
// which needs the prefill's bootstrap server. Picked for a prefill whose
// bootstrap server hangs (its first read still running, so it still
// counted as up), such requests waited out the warm-up timeout and got a
// 503, beside a ready prefill. A ready prefill is now preferred.
func TestDPRequestsAvoidAPrefillWhoseBootstrapHangs(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.dpPair()
		unsure := h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, DPSize: 4, BootstrapPort: 9001})
		hang := make(chan struct{})
		h.backend("prefill-1:9002", func(ctx *fasthttp.RequestCtx) { <-hang })
		cfg := warmConfig()
		cfg.Prefill = append(cfg.Prefill, PrefillSpec{URL: "http://prefill-1:30000", BootstrapPort: 9002})
		cfg.PrefillPolicy = PolicyRoundRobin
		cfg.WarmupTimeout = 2 * time.Second
		srv := h.start(cfg)
		t.Cleanup(func() { close(hang) }) // before pdlb's shutdown waits for the read
		h.waitBootstrap()
		if srv.registry.State(1).Ready {
			t.Fatal("the hanging bootstrap server was read")
		}
		for i := range 4 {
			if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 1}`); r.status != fasthttp.StatusOK {
				t.Fatalf("request %d: got %d %s", i, r.status, r.body)
			}
		}
		// Nor do other requests go there: their KV transfers would wait on
		// that server too.
		for _, body := range []string{`{"text": "a"}`, `{"text": "a"}`, `{"text": "a", "routed_dp_rank": 1}`, `{"text": "a", "routed_dp_rank": 1}`} {
			if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
				t.Fatalf("%s: got %d %s", body, r.status, r.body)
			}
		}
		if n := unsure.Stats().GenerateRequests; n != 0 {
			t.Fatalf("the prefill whose bootstrap server hangs got %d requests; want 0", n)
		}
	})
}

// A pair whose decode restarted went cold and stayed so until a request
// carrying disagg_prefill_dp_rank warmed it, paying for the warm-up; the
// README promised it warmed again. It now is, in the background.
func TestPairWarmedAgainAfterADecodeRestart(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.dpPair()
		cfg := warmConfig()
		cfg.BootstrapRefresh = 20 * time.Millisecond
		srv := h.start(cfg)
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the pair to be warm", func() bool { return srv.warm.isWarm(pr) })
		_ = d.Close()
		h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true})
		// A request without a DP rank finds the old decode's connections gone:
		// pdlb counts a new epoch of the decode, and the pair is cold.
		_, _ = h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`)
		waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
	})
}

// --prefill-dp-policy places requests on warm pairs only. A pair whose
// warm-up failed made each request wait for another one, the warm-up
// timeout at worst, then go unplaced without a word; it now goes unplaced
// at once while the pair is warmed in the background, and is counted.
func TestDPPolicyOnAFailingPair(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{DPSize: 2, Tokens: 2, PrefillDelay: 300 * time.Millisecond}, fake.Config{DPSize: 2, Tokens: 2})
		cfg := warmConfig()
		cfg.PrefillDPPolicy = DPPolicyRoundRobin
		cfg.WarmupTimeout = 50 * time.Millisecond // shorter than a prefill
		srv := h.start(cfg)
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the startup warm-up to fail", func() bool {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return pr.running == nil && pr.lastErr != nil
		})
		failed := h.metric(`pdlb_warmups_total{result="failed"}`)
		for range 3 {
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if got := h.metric("pdlb_dp_policy_unplaced_total"); got != "3" {
			t.Fatalf("pdlb_dp_policy_unplaced_total is %q; want 3", got)
		}
		// No request started, or waited for, a warm-up of its own: the failed
		// pair's next one is due failedRetryAfter after the last.
		if got := h.metric(`pdlb_warmups_total{result="failed"}`); got != failed {
			t.Fatalf("%s failed warm-ups after the requests; want %s, as before them", got, failed)
		}
	})
}

// A decode that restarted without pdlb's connections to it dropping (none
// was open) is seen by its health checks alone: back from down, its pairs
// are cold and warmed again, before a request carrying
// disagg_prefill_dp_rank hits the first-request bug.
func TestPairWarmedAgainWhenItsDecodeIsBackUp(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.dpPair()
		cfg := warmConfig()
		cfg.BootstrapRefresh = 20 * time.Millisecond
		cfg.HealthCheck = HealthCheckConfig{Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}
		srv := h.start(cfg)
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the pair to be warm", func() bool { return srv.warm.isWarm(pr) })
		for _, b := range srv.allBackends() {
			b.hc.CloseIdleConnections() // no pooled connection is left to drop
		}
		_ = d.Close()
		waitFor(t, "the decode to be down", func() bool { return !srv.decodes.backends()[0].available() })
		h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true})
		waitFor(t, "the pair to be warm again", func() bool { return srv.decodes.backends()[0].available() && srv.warm.isWarm(pr) })
		if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 1}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if n := h.decode.Stats().FirstRequestFailures; n != 0 {
			t.Fatalf("%d requests hit the first-request bug", n)
		}
	})
}

// A warm-up whose prefill refuses pdlb's key says so: the decode, cancelled
// because of it, is not blamed. The log named the decode's cancellation
// and never the prefill's 401.
func TestWarmupFailureNamesThePrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{APIKey: "workers-key"}, fake.Config{})
		srv := h.start(warmConfig())
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		var err error
		waitFor(t, "the startup warm-up to fail", func() bool {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			err = pr.lastErr
			return pr.running == nil && err != nil
		})
		if msg := err.Error(); !strings.Contains(msg, "prefill") || !strings.Contains(msg, "401") {
			t.Fatalf("the warm-up failed with %q; want the prefill's 401", msg)
		}
	})
}

// A warm-up whose prefill ends early with a 200 (aborted, as by an
// operator's abort_all) cancels the decode before it ran: that is no
// warmth, though neither leg failed with an error.
func TestWarmupWhosePrefillWasAbortedIsNoWarmth(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{FirstRequestBug: true})
		if err := d.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
			t.Fatal(err)
		}
		srv := h.start(warmConfig())
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the warm-up to be held", func() bool { return d.Stats().FaultsInjected > 0 && p.Stats().InFlight > 0 })
		cl := &fasthttp.HostClient{Addr: "prefill-0:30000", Dial: h.nw.Dial}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://prefill-0:30000/abort_request")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString(`{"abort_all": true}`)
		if err := cl.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		cl.CloseIdleConnections()
		waitFor(t, "the warm-up to end", func() bool {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return pr.running == nil
		})
		if srv.warm.isWarm(pr) {
			t.Errorf("the pair is warm though the decode never ran the warm-up (decode generate requests: %d)", d.Stats().GenerateRequests)
		}
		_ = d.SetFault(fake.Fault{})
	})
}

// A request waiting for its pair's warm-up whose client goes away ends
// then, as the client's leaving (499), and is not sent once the pair is
// warm: it was served in full, for no one, and counted as a 200.
func TestClientLeavingDuringTheWarmupWaitEndsTheRequest(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.dpPair()
		if err := d.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
			t.Fatal(err)
		}
		srv := h.start(warmConfig()) // the startup warm-up is held by the decode
		h.waitBootstrap()
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the warm-up to be held", func() bool { return d.Stats().FaultsInjected > 0 })
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		sendRequest(t, conn, "/generate", seedRequest)
		// The request was sent whole: pdlb reads it even after the close, and
		// finds the client gone when it watches the connection.
		_ = conn.Close()
		waitFor(t, "the request to end as its client's leaving", func() bool {
			return h.metric(`pdlb_requests_total{route="/generate",code="499"}`) == "1"
		})
		if srv.warm.isWarm(pr) {
			t.Fatal("the pair is warm while its warm-up is held")
		}
		// The request ended there: once the pair is warm, nothing is sent for
		// it, and nothing is counted but the 499.
		if err := d.SetFault(fake.Fault{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the pair to be warm", func() bool { return srv.warm.isWarm(pr) })
		waitIdle(t, srv)
		if got := h.metric(`pdlb_requests_total{route="/generate",code="200"}`); got != "" && got != "0" {
			t.Errorf("%s requests were answered 200; want none", got)
		}
		if n := p.Stats().KVTransfersFailed; n != 0 {
			t.Errorf("the prefill failed %d KV transfers; want none", n)
		}
	})
}
