package lb

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// /flush_cache answers with each worker and its status, also when all
// succeed: it was an empty 200, which told an operator nothing of which
// workers flushed (issue 20; the README promises each worker's status).
func TestFlushCacheReportsEachWorker(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
		cfg := fallbackConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)

		r := h.post("/flush_cache", "")
		want := `[{"role":"prefill","url":"http://prefill-0:30000","status":200},` +
			`{"role":"decode","url":"http://decode-0:30010","status":200},` +
			`{"role":"fallback","url":"http://agg-0:30020","status":200}]`
		if r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "backends").Raw != want || gjson.GetBytes(r.body, "error").Exists() {
			t.Fatalf("got %d %s; want 200 with backends %s and no error", r.status, r.body, want)
		}
		if ct := string(r.header.ContentType()); ct != "application/json" {
			t.Errorf("got Content-Type %q; want application/json", ct)
		}
		if p.Stats().FlushCache != 1 || d.Stats().FlushCache != 1 {
			t.Errorf("got %d prefill and %d decode flushes; want 1 each", p.Stats().FlushCache, d.Stats().FlushCache)
		}
	})
}

// A worker that fails the flush is named with its status, beside those
// that flushed, in a 502.
func TestFlushCacheReportsTheWorkerThatFailed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.Error("out of memory", fasthttp.StatusInternalServerError)
		})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)

		r := h.post("/flush_cache", "")
		want := `[{"role":"prefill","url":"http://prefill-0:30000","status":200},` +
			`{"role":"decode","url":"http://decode-0:30010","status":500}]`
		if r.status != fasthttp.StatusBadGateway || gjson.GetBytes(r.body, "backends").Raw != want ||
			gjson.GetBytes(r.body, "error.message").String() != "1 of 2 backends failed /flush_cache" {
			t.Fatalf("got %d %s; want 502, 1 of 2 failed, with backends %s", r.status, r.body, want)
		}
	})
}
