package lb

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/health"
)

// waitIdle fails the test unless every exchange of srv ends within a
// second, leaving no request in flight: a cancelled leg must let go at once.
func waitIdle(t *testing.T, srv *Server) {
	t.Helper()
	waitIdleWithin(t, srv, time.Second)
}

// waitIdleWithin is waitIdle with a limit of its own.
func waitIdleWithin(t *testing.T, srv *Server, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := srv.waitExchanges(ctx); err != nil {
		t.Fatalf("exchanges still live: %s", err)
	}
	for _, b := range srv.allBackends() {
		if n := b.inflight.Load(); n != 0 {
			t.Fatalf("%s backend %s still has %d requests in flight", b.role, b.addr, n)
		}
	}
	// Every body is given back to the memory budget: by the exchanges,
	// released now, and by their handlers, which may still be returning.
	settled(t, "no body memory held", func() bool { return srv.memory.used.Load() == 0 })
}

// When one leg fails, the other is cancelled at once and the client hears
// about the failure in well under the workers' KV timeout (sglang#9726).
func TestFailedLegCancelsItsPeer(t *testing.T) {
	prefillDown := func(h *harness) {
		h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
	}
	prefillRefuses := func(h *harness) {
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"error": {"message": "overloaded"}}`)
		})
		d := h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 20 * time.Second})
		// The decode holds the request, as a real one waits for the KV
		// cache, so the prefill's answer comes first.
		if err := d.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { _ = d.SetFault(fake.Fault{}) })
	}
	decodeDown := func(h *harness) {
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 20 * time.Second})
	}
	for _, tc := range []struct {
		name   string
		setup  func(*harness)
		status int
		// body is the exact answer, or else a part of its error message.
		body, message string
	}{
		// With the only worker of a pool unreachable, the pool is empty.
		{name: "prefill down", setup: prefillDown, status: fasthttp.StatusServiceUnavailable,
			message: "no prefill backend is available, and no fallback backend is configured (--fallback) (cannot reach prefill backend prefill-0:30000"},
		{name: "prefill refuses", setup: prefillRefuses, status: fasthttp.StatusServiceUnavailable, body: `{"error": {"message": "overloaded"}}`},
		{name: "decode down", setup: decodeDown, status: fasthttp.StatusServiceUnavailable,
			message: "no decode backend is available, and no fallback backend is configured (--fallback) (cannot reach decode backend decode-0:30010"},
	} {
		for _, stream := range []string{"false", "true"} {
			t.Run(tc.name+"/stream="+stream, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					h := newHarness(t)
					tc.setup(h)
					srv := h.start(defaultConfig())
					r := h.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "stream": `+stream+`}`)
					if r.status != tc.status {
						t.Fatalf("got %d %s; want %d", r.status, r.body, tc.status)
					}
					if tc.body != "" && string(r.body) != tc.body {
						t.Fatalf("got %s; want the failing worker's answer %s", r.body, tc.body)
					}
					if msg := gjson.GetBytes(r.body, "error.message").String(); !strings.Contains(msg, tc.message) {
						t.Fatalf("got message %q; want it to contain %q", msg, tc.message)
					}
					if r.took > 2*time.Second {
						t.Fatalf("the client waited %s", r.took)
					}
					waitIdle(t, srv)
				})
			})
		}
	}
}

// A call cancelled just as its answer has been read (its peer failed
// meanwhile) has had its connection closed by the cancel: that connection
// must not go back to the pool, where the next request would take it and
// fail ("use of closed network connection").
func TestConnectionClosedByACancelIsNotPooled(t *testing.T) {
	h := newHarness(t)
	h.tcpWorkers = true // a closed socket fails the next deadline, as in production
	const marker = "end-of-the-prefill-answer"
	h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text": "", "note": "` + marker + `"}`)
	})
	failDecode := make(chan struct{})
	var decodes atomic.Int32
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		if decodes.Add(1) == 1 {
			<-failDecode
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			ctx.SetBodyString(`{"error": {"message": "decode failed"}}`)
			return
		}
		ctx.SetBodyString(`{"text": "ok"}`)
	})
	// The first prefill answer, once read, is held in the read until the
	// decode has failed and pdlb has cancelled the prefill, closing its
	// connection: the cancel lands between the read and the connection's
	// return to the pool.
	var holdOnce sync.Once
	h.wrapWorker = func(addr string, c net.Conn) net.Conn {
		if addr != "prefill-0:30000" {
			return c
		}
		hc := &holdingConn{Conn: c, closed: make(chan struct{})}
		hc.onRead = func(p []byte) {
			if bytes.Contains(p, []byte(marker)) {
				holdOnce.Do(func() {
					close(failDecode)
					select {
					case <-hc.closed:
					case <-time.After(5 * time.Second):
						t.Error("pdlb did not cancel the prefill when the decode failed")
					}
				})
			}
		}
		return hc
	}
	cfg := defaultConfig()
	cfg.DisableRetries = true // the next request is the one to take the pool's connection
	srv := h.start(cfg)
	if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusBadGateway && r.status != fasthttp.StatusInternalServerError {
		t.Fatalf("with the decode failing: got %d %s", r.status, r.body)
	}
	waitIdle(t, srv)
	if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
		t.Fatalf("the next request: got %d %s; want 200", r.status, r.body)
	}
}

// holdingConn is a connection that calls onRead with what each read read,
// before returning it, and closes closed when it is closed.
type holdingConn struct {
	net.Conn
	onRead    func(p []byte)
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *holdingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.onRead(p[:n])
	return n, err
}

func (c *holdingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func TestTimeoutGives504(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

func TestNoBackendGives503(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		srv := h.start(defaultConfig())
		srv.decodes.backends()[0].health.Store(int32(health.Down))
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "no decode backend is available") {
			t.Fatalf("got %d %s; want a 503 naming the empty pool", r.status, r.body)
		}
		if r.header.Peek("Retry-After") == nil {
			t.Fatalf("a 503 must say when to retry")
		}
		// It went nowhere: it is no decode-only request.
		if got := h.metric(`pdlb_decode_only_total{reason="no_decode"}`); got != "0" {
			t.Fatalf("got pdlb_decode_only_total{reason=\"no_decode\"} %q; want 0", got)
		}
	})
}

// A worker's failed answer that the client gets as it is (out of retries)
// is logged as a warning naming the worker, its role and status: the
// access line names both workers of the pair, and nothing said which one
// failed.
func TestPassedOnFailureIsLogged(t *testing.T) {
	for _, c := range []struct {
		name, role, backend, body string
	}{
		{"decode", roleDecode, "decode-0:30010", `{"text": "a"}`},
		{"decode stream", roleDecode, "decode-0:30010", `{"text": "a", "stream": true}`},
		{"prefill", rolePrefill, "prefill-0:30000", `{"text": "a"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				var served atomic.Int32
				fail := failing(&served, fasthttp.StatusServiceUnavailable, `{"error": "boom"}`)
				if c.role == rolePrefill {
					release := make(chan struct{})
					h.backend("prefill-0:30000", fail)
					h.backend("decode-0:30010", func(*fasthttp.RequestCtx) { <-release }) // the KV cache never comes
					// Registered last, so run first: the backend's shutdown waits for it.
					t.Cleanup(func() { close(release) })
				} else {
					h.backend("prefill-0:30000", jsonBackend(`{}`))
					h.backend("decode-0:30010", fail)
				}
				cfg := defaultConfig()
				cfg.DisableRetries = true
				var logs syncBuffer
				srv := h.startLogged(cfg, zerolog.New(&logs).Level(zerolog.WarnLevel))
				r := h.post("/generate", c.body, "X-Request-Id", "r-1")
				if r.status != fasthttp.StatusServiceUnavailable {
					t.Fatalf("got %d %s; want the %s's 503", r.status, r.body, c.role)
				}
				waitIdle(t, srv)
				var warned []string
				for line := range strings.Lines(logs.String()) {
					if gjson.Get(line, "request_id").String() == "r-1" && gjson.Get(line, "level").String() == "warn" {
						warned = append(warned, line)
					}
				}
				if len(warned) != 1 || gjson.Get(warned[0], "role").String() != c.role ||
					gjson.Get(warned[0], "backend").String() != c.backend || gjson.Get(warned[0], "status").Int() != 503 {
					t.Fatalf("got warnings %q; want one naming the %s %s and its 503", warned, c.role, c.backend)
				}
			})
		})
	}
}
