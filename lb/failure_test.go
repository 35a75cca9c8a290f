package lb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// waitIdle fails the test unless every exchange of srv ends within a
// second, leaving no request in flight: a cancelled leg must let go at once.
func waitIdle(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.waitExchanges(ctx); err != nil {
		t.Fatalf("exchanges still live: %s", err)
	}
	for _, b := range srv.allBackends() {
		if n := b.inflight.Load(); n != 0 {
			t.Fatalf("%s backend %s still has %d requests in flight", b.role, b.addr, n)
		}
	}
}

// A dead prefill must not leave the client waiting for the decode's KV
// timeout (sglang#9726): the client hears about the prefill at once.
func TestDeadPrefillFailsFast(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "stream"}[stream], func(t *testing.T) {
			h := newHarness(t)
			h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
			srv := h.start(defaultConfig())
			body := `{"text": "a"}`
			if stream {
				body = `{"text": "a", "stream": true}`
			}
			r := h.post("/generate", body)
			if r.status != fasthttp.StatusBadGateway {
				t.Fatalf("got %d %s; want 502", r.status, r.body)
			}
			if msg := gjson.GetBytes(r.body, "error.message").String(); !strings.Contains(msg, "prefill backend prefill-0:30000") {
				t.Fatalf("got message %q; want it to name the prefill", msg)
			}
			if r.took > 2*time.Second {
				t.Fatalf("the client waited %s for a dead prefill", r.took)
			}
			waitIdle(t, srv)
		})
	}
}

// A prefill that answers with an error cancels the decode, and the client
// gets the prefill's answer.
func TestPrefillErrorReachesClient(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "stream"}[stream], func(t *testing.T) {
			h := newHarness(t)
			h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"error": {"message": "overloaded"}}`)
			})
			h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
			srv := h.start(defaultConfig())
			body := `{"text": "a"}`
			if stream {
				body = `{"text": "a", "stream": true}`
			}
			r := h.post("/generate", body)
			if r.status != fasthttp.StatusServiceUnavailable || string(r.body) != `{"error": {"message": "overloaded"}}` {
				t.Fatalf("got %d %s; want the prefill's 503", r.status, r.body)
			}
			if r.took > 2*time.Second {
				t.Fatalf("the client waited %s", r.took)
			}
			waitIdle(t, srv)
		})
	}
}

// A dead decode must not leave the prefill holding its KV cache.
func TestDeadDecodeFailsFast(t *testing.T) {
	h := newHarness(t)
	h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 20 * time.Second})
	srv := h.start(defaultConfig())
	r := h.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`)
	if r.status != fasthttp.StatusBadGateway || !strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "decode backend decode-0:30010") {
		t.Fatalf("got %d %s; want a 502 naming the decode", r.status, r.body)
	}
	if r.took > 2*time.Second {
		t.Fatalf("the client waited %s", r.took)
	}
	waitIdle(t, srv)
}

func TestTimeoutGives504(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	defer close(release)
	hang := func(ctx *fasthttp.RequestCtx) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}
	h.backend("prefill-0:30000", hang)
	h.backend("decode-0:30010", hang)
	cfg := defaultConfig()
	cfg.RequestTimeout = 200 * time.Millisecond
	srv := h.start(cfg)
	for _, body := range []string{`{"text": "a"}`, `{"text": "a", "stream": true}`} {
		r := h.post("/generate", body)
		if r.status != fasthttp.StatusGatewayTimeout || gjson.GetBytes(r.body, "error.type").String() != "gateway_timeout" {
			t.Fatalf("%s: got %d %s; want 504", body, r.status, r.body)
		}
		if r.took > 2*time.Second {
			t.Fatalf("the timeout took %s", r.took)
		}
	}
	waitIdle(t, srv)
}

func TestNoBackendGives503(t *testing.T) {
	h := newHarness(t)
	h.pair(fake.Config{}, fake.Config{})
	srv := h.start(defaultConfig())
	srv.decodes.backends[0].healthy.Store(false)
	r := h.post("/generate", `{"text": "a"}`)
	if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "no decode backend is available") {
		t.Fatalf("got %d %s; want a 503 naming the empty pool", r.status, r.body)
	}
	if r.header.Peek("Retry-After") == nil {
		t.Fatalf("a 503 must say when to retry")
	}
}
