package lb

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// fallbackConfig is defaultConfig with one aggregated fallback worker.
func fallbackConfig() Config {
	cfg := defaultConfig()
	cfg.Fallback = []string{"http://agg-0:30020"}
	return cfg
}

// metric returns the value of the metric line name in /metrics, or "".
func (h *harness) metric(name string) string {
	h.t.Helper()
	r := h.do(fasthttp.MethodGet, "/metrics", "")
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// With every prefill stopped, requests still succeed on the fallback pool,
// unchanged, and the metrics say why.
func TestNoPrefillGoesToFallback(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var ab bodies
		agg := h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated, OnRequest: ab.record})
		decode := h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode})
		srv := h.start(fallbackConfig())
		body := `{"text": "Hello", "sampling_params": {"max_new_tokens": 2}, "x": 1.50}`
		if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if got := string(ab.only(t)); got != body {
			t.Fatalf("the fallback got %s; want the client's body unchanged", got)
		}
		s := h.openStream("/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "stream": true}`)
		if events := append([]string{s.next()}, s.rest()...); s.status != fasthttp.StatusOK || events[len(events)-1] != "data: [DONE]\n\n" {
			t.Fatalf("got %d %q", s.status, events)
		}
		waitIdle(t, srv)
		if got := h.metric(`pdlb_decode_only_total{reason="no_prefill"}`); got != "2" {
			t.Fatalf("got pdlb_decode_only_total{reason=\"no_prefill\"} %q; want 2", got)
		}
		if n := agg.Stats().GenerateRequests; n != 2 {
			t.Fatalf("the fallback served %d requests; want 2", n)
		}
		// The decode got the first attempts (both legs start at once), each
		// with its room, and never a request without one.
		if n := decode.Stats().RejectedNoRoom; n != 0 {
			t.Fatalf("the decode refused %d requests without a room", n)
		}
	})
}

func TestNoDecodeGoesToFallback(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 20 * time.Second})
		h.start(fallbackConfig())
		r := h.post("/v1/completions", `{"prompt": "a"}`)
		if r.status != fasthttp.StatusOK || r.took > 2*time.Second {
			t.Fatalf("got %d in %s: %s", r.status, r.took, r.body)
		}
		if got := h.metric(`pdlb_decode_only_total{reason="no_decode"}`); got != "1" {
			t.Fatalf("got %q no_decode requests; want 1", got)
		}
	})
}

func TestEmptyFallbackPoolGives503(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.start(fallbackConfig()) // nothing listens anywhere
		r := h.post("/generate", `{"text": "a"}`)
		msg := gjson.GetBytes(r.body, "error.message").String()
		// Both PD pools are empty; the answer names the one pdlb found empty
		// first, the fallback pool, and every worker it could not reach.
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(msg, "backend is available, and no fallback backend is available") ||
			!strings.Contains(msg, "cannot reach fallback backend agg-0:30020") || r.took > time.Second {
			t.Fatalf("got %d in %s: %s", r.status, r.took, r.body)
		}
	})
}

// Prompts below --pd-min-prompt-tokens skip remote prefill.
func TestShortPromptsGoToFallback(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		agg := h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		_, d := h.pair(fake.Config{}, fake.Config{})
		cfg := fallbackConfig()
		cfg.PDMinPromptTokens = 64
		h.start(cfg)
		for _, body := range []string{`{"text": "a short prompt"}`, `{"input_ids": [1, 2, 3]}`} {
			if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
				t.Fatalf("%s: got %d %s", body, r.status, r.body)
			}
		}
		if r := h.post("/v1/completions", `{"prompt": "hi"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		long := `{"text": "` + strings.Repeat("long ", 100) + `"}`
		if r := h.post("/generate", long); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		// An upstream decider's X-PD-Mode: pd, and a list of prompts (a batch,
		// not estimated), go PD whatever their size.
		if r := h.post("/generate", `{"text": "hi"}`, "X-PD-Mode", "pd"); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if r := h.post("/v1/completions", `{"prompt": ["hi", "yo"]}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if a, pd := agg.Stats().GenerateRequests, d.Stats().GenerateRequests; a != 3 || pd != 3 {
			t.Fatalf("fallback served %d and the PD pair %d; want 3 and 3", a, pd)
		}
		if got := h.metric(`pdlb_decode_only_total{reason="short_prompt"}`); got != "3" {
			t.Fatalf("got %q short_prompt requests; want 3", got)
		}
	})
}

// An upstream router's decider asks for decode-only with a header.
func TestDecodeOnlyHeader(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		agg := h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		_, d := h.pair(fake.Config{}, fake.Config{})
		h.start(fallbackConfig())
		if r := h.post("/generate", `{"text": "a"}`, "X-PD-Mode", "decode-only"); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if r := h.post("/generate", `{"text": "a"}`, "X-PD-Mode", "PD"); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if a, pd := agg.Stats().GenerateRequests, d.Stats().GenerateRequests; a != 1 || pd != 1 {
			t.Fatalf("fallback served %d and the PD pair %d; want 1 and 1", a, pd)
		}
		r := h.post("/generate", `{"text": "a"}`, "X-PD-Mode", "sideways")
		if r.status != fasthttp.StatusBadRequest || !strings.Contains(string(r.body), "X-PD-Mode must be pd or decode-only") {
			t.Fatalf("got %d %s; want a 400 for an unknown mode", r.status, r.body)
		}
		if got := h.metric(`pdlb_decode_only_total{reason="header"}`); got != "1" {
			t.Fatalf("got %q header requests; want 1", got)
		}
	})
}

// A decode that says it got no room despite pdlb's is misconfigured: pdlb
// says so instead of passing the puzzling 400 on.
func TestDecodeRefusingTheRoomIsExplained(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 20 * time.Second})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			ctx.SetBodyString(`{"error": {"message": "Invalid request: Disaggregated request received without bootstrap room id. req.rid='x'"}}`)
		})
		srv := h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusBadGateway || !strings.Contains(string(r.body), "says the request had no bootstrap room, but pdlb sent one") {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		waitIdle(t, srv)
		if got := h.metric(`pdlb_request_errors_total{reason="decode_refused_no_room"}`); got != "1" {
			t.Fatalf("got %q; want 1", got)
		}
	})
}

// With --decode-local-prefill, decode-only /generate traffic goes to a decode
// that prefills it itself; other routes still use the fallback pool.
func TestDecodeLocalPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		agg := h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		var db bodies
		_, d := h.pair(fake.Config{}, fake.Config{ConditionalAgg: true, OnRequest: db.record})
		cfg := fallbackConfig()
		cfg.DecodeLocalPrefill = true
		h.start(cfg)
		if r := h.post("/generate", `{"text": "a", "bootstrap_room": 5}`, "X-PD-Mode", "decode-only"); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if got := string(db.only(t)); got != `{"text": "a","do_local_prefill":true}` {
			t.Fatalf("the decode got %s; want the body marked for local prefill, with no bootstrap field", got)
		}
		if r := h.post("/v1/completions", `{"prompt": "a"}`, "X-PD-Mode", "decode-only"); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if local, a := d.Stats().LocalPrefills, agg.Stats().GenerateRequests; local != 1 || a != 1 {
			t.Fatalf("the decode prefilled %d requests and the fallback served %d; want 1 and 1", local, a)
		}
		if n := d.Stats().RejectedNoRoom; n != 0 {
			t.Fatalf("the decode refused %d requests", n)
		}
	})
}

// A decode without local prefill refuses the request; pdlb says it is a
// configuration error, uses the fallback pool from then on, or explains
// the failure when there is none.
func TestDecodeWithoutLocalPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, withFallback := range []bool{true, false} {
			h := newHarness(t)
			agg := h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
			_, d := h.pair(fake.Config{}, fake.Config{})
			h.noRoomRefusals = 1 // the refusal that shows local prefill is missing
			cfg := defaultConfig()
			if withFallback {
				cfg = fallbackConfig()
			}
			cfg.DecodeLocalPrefill = true
			var logs syncBuffer
			h.startLogged(cfg, zerolog.New(&logs))
			for i := range 3 {
				r := h.post("/generate", `{"text": "a"}`, "X-PD-Mode", "decode-only")
				switch {
				case withFallback && r.status != fasthttp.StatusOK:
					t.Fatalf("got %d %s; want the fallback's answer", r.status, r.body)
				case !withFallback && i == 0 && (r.status != fasthttp.StatusBadGateway || !strings.Contains(string(r.body), "does not support local prefill")):
					t.Fatalf("got %d %s; want a 502 that explains", r.status, r.body)
				case !withFallback && i > 0 && (r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "cannot prefill locally")):
					t.Fatalf("got %d %s; want a 503 that explains", r.status, r.body)
				}
			}
			// The configuration error says where decode-only traffic goes now.
			want := "now goes to the fallback pool"
			if !withFallback {
				want = "now gets a 503, as no fallback pool is configured"
			}
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q:\n%s", want, logs.String())
			}
			if withFallback {
				if n := d.Stats().RejectedNoRoom; n != 1 {
					t.Fatalf("the decode refused %d requests; want only the first", n)
				}
				if n := agg.Stats().GenerateRequests; n != 3 {
					t.Fatalf("the fallback served %d requests; want 3", n)
				}
				if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "does not support do_local_prefill") {
					t.Fatalf("no configuration error was logged:\n%s", logs.String())
				}
			}
		}
	})
}

// pdlb_decode_only_total counts requests that skipped remote prefill, by
// why; a "pd" series, always 0, was exposed too.
func TestDecodeOnlyMetricHasNoPDSeries(t *testing.T) {
	srv, err := New(defaultConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	srv.ms.WritePrometheus(&out)
	if m := out.String(); strings.Contains(m, `pdlb_decode_only_total{reason="pd"}`) || !strings.Contains(m, `pdlb_decode_only_total{reason="header"}`) {
		t.Fatalf("got %s; want the decode-only reasons only", m)
	}
}
