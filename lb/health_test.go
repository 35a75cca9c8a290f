package lb

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/health"
)

// checkedConfig is defaultConfig with active health checks on.
func checkedConfig() Config {
	cfg := defaultConfig()
	cfg.HealthCheck = HealthCheckConfig{Timeout: time.Second}
	return cfg
}

// waitFirstRound waits (settled) for the health checker's first round,
// which starts with the server, so that the rounds a test drives with
// checkOnce are the only ones until the next interval.
func waitFirstRound(t *testing.T, srv *Server) {
	t.Helper()
	want := uint64(len(srv.allBackends()))
	settled(t, "the health checker's first round", func() bool {
		ok, failed := srv.checker.Probes()
		return ok+failed >= want
	})
}

// sickWorker is a backend whose /health answers healthStatus and whose
// generations are counted and fail.
type sickWorker struct {
	healthStatus atomic.Int32
	generations  atomic.Int32
}

func (w *sickWorker) handle(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/health" {
		ctx.SetStatusCode(int(w.healthStatus.Load()))
		return
	}
	w.generations.Add(1)
	ctx.SetStatusCode(fasthttp.StatusInternalServerError)
}

// withSickDecode gives h the fake pair and a second decode, decode-1, whose
// health probes fail; cfg has active checks on and both decodes.
func withSickDecode(h *harness) (*sickWorker, Config) {
	h.pair(fake.Config{}, fake.Config{})
	sick := &sickWorker{}
	sick.healthStatus.Store(fasthttp.StatusServiceUnavailable)
	h.backend("decode-1:30010", sick.handle)
	cfg := checkedConfig()
	cfg.Decode = append(cfg.Decode, "http://decode-1:30010")
	return sick, cfg
}

// A health transition is logged once, by the health component: each log
// line names its component in one key.
func TestHealthTransitionsAreLoggedByTheirComponent(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, cfg := withSickDecode(h)
		var logs syncBuffer
		srv := h.startLogged(cfg, zerolog.New(&logs))
		waitFirstRound(t, srv)
		srv.checkOnce(5 * time.Second)
		var down []string
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "backend is down") {
				down = append(down, line)
			}
		}
		if len(down) != 1 {
			t.Fatalf("got %d lines saying the sick decode is down; want 1:\n%s", len(down), logs.String())
		}
		if n := strings.Count(down[0], `"component"`); n != 1 || gjson.Get(down[0], "component").String() != "health" {
			t.Fatalf("the line names its component %d times; want once, as health:\n%s", n, down[0])
		}
	})
}

// Active checks take a worker out of selection and put it back once it
// recovers.
func TestActiveChecksTakeWorkersOutAndBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		sick, cfg := withSickDecode(h)
		cfg.DecodePolicy = PolicyRoundRobin
		srv := h.start(cfg)
		waitFirstRound(t, srv)
		srv.checkOnce(5 * time.Second)
		d1 := srv.decodes.backends()[1]
		if health.State(d1.health.Load()) != health.Down || d1.available() {
			t.Fatalf("the sick decode is %v; want down and out of selection", health.State(d1.health.Load()))
		}
		for range 4 {
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if n := sick.generations.Load(); n != 0 {
			t.Fatalf("the sick decode got %d requests", n)
		}
		// Rise is 2: one good probe is not enough to come back.
		sick.healthStatus.Store(fasthttp.StatusOK)
		srv.checkOnce(5 * time.Second)
		if d1.available() {
			t.Fatalf("the decode came back after one good probe")
		}
		srv.checkOnce(5 * time.Second)
		if !d1.available() {
			t.Fatalf("the decode did not come back after two good probes")
		}
	})
}

func TestReadinessAndLiveness(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		agg := &sickWorker{}
		agg.healthStatus.Store(fasthttp.StatusServiceUnavailable)
		h.backend("agg-0:30020", agg.handle)
		cfg := checkedConfig()
		cfg.Fallback = []string{"http://agg-0:30020"}
		srv := h.start(cfg)
		ready := func(want int) {
			t.Helper()
			r := h.do(fasthttp.MethodGet, "/readiness", "")
			if r.status != want || gjson.GetBytes(r.body, "ready").Bool() != (want == fasthttp.StatusOK) {
				t.Fatalf("got /readiness %d %s; want %d", r.status, r.body, want)
			}
		}
		waitFirstRound(t, srv)
		srv.checkOnce(5 * time.Second)
		ready(fasthttp.StatusOK)
		if err := h.decode.Close(); err != nil {
			t.Fatal(err)
		}
		srv.checkOnce(5 * time.Second)
		srv.checkOnce(5 * time.Second)
		srv.checkOnce(5 * time.Second) // Fall is 3
		ready(fasthttp.StatusServiceUnavailable)
		r := h.do(fasthttp.MethodGet, "/readiness", "")
		if gjson.GetBytes(r.body, "decode.ready").Int() != 0 || gjson.GetBytes(r.body, "prefill.ready").Int() != 1 {
			t.Fatalf("got %s", r.body)
		}
		// A ready fallback is enough (Rise is 2).
		agg.healthStatus.Store(fasthttp.StatusOK)
		srv.checkOnce(5 * time.Second)
		srv.checkOnce(5 * time.Second)
		ready(fasthttp.StatusOK)
		if r := h.do(fasthttp.MethodGet, "/liveness", ""); r.status != fasthttp.StatusOK {
			t.Fatalf("got /liveness %d", r.status)
		}
	})
}

// Consecutive failures of real requests eject a worker.
func TestBreakerEjectsAFailingWorker(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var broken atomic.Int32
		h.backend("prefill-9:30000", failing(&broken, fasthttp.StatusInternalServerError, `{}`))
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.Prefill = []PrefillSpec{{URL: "http://prefill-9:30000", BootstrapPort: 8998}, cfg.Prefill[0]}
		cfg.PrefillPolicy = PolicyRoundRobin
		cfg.Breaker = BreakerConfig{Threshold: 2, MinBackoff: time.Hour}
		h.start(cfg)
		h.waitFirstReads()
		for range 6 {
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if n := broken.Load(); n != 2 {
			t.Fatalf("the broken prefill got %d requests; want 2, then none once ejected", n)
		}
		if got := h.metric(`pdlb_backend_ejections_total{role="prefill",backend="prefill-9:30000"}`); got != "1" {
			t.Fatalf("got %q ejections", got)
		}
		if got := h.metric(`pdlb_backend_up{role="prefill",backend="prefill-9:30000"}`); got != "0" {
			t.Fatalf("got pdlb_backend_up %q; want 0", got)
		}
	})
}

// The ejection's log line names the failure that caused it: a decode whose
// stream broke off was ejected with "status":200 and no error.
func TestEjectionNamesItsCause(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.pair(fake.Config{}, fake.Config{})
		if err := d.SetFault(fake.Fault{Kind: fake.FaultCut, Events: 1}); err != nil {
			t.Fatal(err)
		}
		cfg := defaultConfig()
		cfg.Breaker = BreakerConfig{Threshold: 1, MinBackoff: time.Hour}
		var logs syncBuffer
		h.startLogged(cfg, zerolog.New(&logs))
		s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 3}}`)
		s.rest()
		for line := range strings.Lines(logs.String()) {
			if gjson.Get(line, "message").String() == "ejecting the worker after consecutive failures" {
				if gjson.Get(line, "status").Int() != 200 || !strings.HasPrefix(gjson.Get(line, "error").String(), "the stream broke off: ") {
					t.Fatalf("got %s; want the status and why the stream broke off", line)
				}
				return
			}
		}
		t.Fatalf("no ejection in the log:\n%s", logs.String())
	})
}

// A prefill whose bootstrap server is not ready can take no KV transfer.
func TestPrefillWithoutBootstrapIsTakenOut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{RegisterDelay: time.Hour}, fake.Config{})
		h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		cfg := checkedConfig()
		cfg.Fallback = []string{"http://agg-0:30020"}
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		srv := h.start(cfg)
		if err := srv.registry.Refresh(context.Background(), 0); err == nil {
			t.Fatalf("the bootstrap server says it is registered")
		}
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if got := h.metric(`pdlb_decode_only_total{reason="no_prefill"}`); got != "1" {
			t.Fatalf("got %q no_prefill requests; want 1", got)
		}
		b := h.do(fasthttp.MethodGet, "/bootstrap", "")
		if e := gjson.GetBytes(b.body, "prefills.0.error").String(); !strings.Contains(e, "not fully registered") {
			t.Fatalf("got bootstrap error %q", e)
		}
	})
}

// The 503 of a pool with every worker out says why each is out; it said
// only "no prefill backend is available".
func TestEmptyPoolSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name  string
		setUp func(t *testing.T, h *harness)
		want  string
	}{
		{"bootstrap not ready", func(t *testing.T, h *harness) {
			h.pair(fake.Config{RegisterDelay: time.Hour}, fake.Config{})
			srv := h.start(checkedConfig())
			if err := srv.registry.Refresh(context.Background(), 0); err == nil {
				t.Fatalf("the bootstrap server says it is registered")
			}
		}, "no prefill backend is available (prefill-0:30000: bootstrap server not ready: cannot fetch parallel info from bootstrap server prefill-0:8998: "},
		{"health check failed", func(t *testing.T, h *harness) {
			h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill})
			sick := &sickWorker{}
			sick.healthStatus.Store(fasthttp.StatusServiceUnavailable)
			h.backend("decode-0:30010", sick.handle)
			srv := h.start(checkedConfig())
			waitFirstRound(t, srv)
			srv.checkOnce(5 * time.Second)
		}, "no decode backend is available (decode-0:30010: failed its health check (GET /health returned status 503; want 200))" +
			", and no fallback backend is configured (--fallback)"},
		{"ejected", func(t *testing.T, h *harness) {
			var served atomic.Int32
			h.backend("prefill-0:30000", failing(&served, fasthttp.StatusInternalServerError, `{}`))
			h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode})
			cfg := defaultConfig()
			cfg.Breaker = BreakerConfig{Threshold: 1, MinBackoff: time.Hour}
			h.start(cfg)
			// The failure that ejects the only prefill is answered as it is.
			if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusInternalServerError {
				t.Fatalf("the request that ejects the prefill got %d %s; want its 500", r.status, r.body)
			}
		}, "no prefill backend is available (prefill-0:30000: ejected after consecutive failures)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				c.setUp(t, h)
				r := h.post("/generate", `{"text": "a"}`)
				if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(msg, c.want) {
					t.Fatalf("got %d %s; want a 503 saying %q", r.status, r.body, c.want)
				}
			})
		})
	}
}

// A worker not yet probed may be picked, but does not make pdlb ready.
func TestUnprobedWorkersAreUsableButNotReady(t *testing.T) {
	p := testPool(PolicyRandom, 1)
	b := p.backends()[0]
	if !b.available() || b.confirmed(true) || !b.confirmed(false) {
		t.Fatalf("an unprobed worker: available %v, confirmed %v", b.available(), b.confirmed(true))
	}
	b.health.Store(int32(health.Up))
	if !b.confirmed(true) {
		t.Fatalf("a worker known up is not confirmed")
	}
}
