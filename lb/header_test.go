package lb

import (
	"bufio"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// Every X-Request-Id a client sent is replaced: the workers get exactly
// one, pdlb's. A second one reached them as the client wrote it (issue
// 19), as the call's SetBytesKV replaces the first only.
func TestWorkersGetOneRequestID(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idHeaders []string // Config.RequestIDHeaders
		sent      [][2]string
		want      string // "" for pdlb's own, drawn
	}{
		{"two", nil, [][2]string{{"X-Request-Id", "first"}, {"X-Request-Id", "second"}}, "first"},
		{"three, spelled apart", nil, [][2]string{{"x-request-id", "a"}, {"X-REQUEST-ID", "b"}, {"X-Request-Id", "c"}}, "a"},
		{"one, not the ID header", []string{"X-Trace-Id"}, [][2]string{{"X-Request-Id", "evil"}, {"X-Trace-Id", "t-1"}}, "t-1"},
		{"two, not the ID header", []string{"X-Trace-Id"}, [][2]string{{"X-Request-Id", "evil"}, {"X-Request-Id", "evil2"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				ids := make(chan string, 2)
				record := func(ctx *fasthttp.RequestCtx) {
					var got []string
					for _, v := range ctx.Request.Header.PeekAll("X-Request-Id") {
						got = append(got, string(v))
					}
					ids <- strings.Join(got, ",")
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"text": "ok"}`)
				}
				h.backend("prefill-0:30000", record)
				h.backend("decode-0:30010", record)
				cfg := defaultConfig()
				cfg.RequestIDHeaders = tc.idHeaders
				h.start(cfg)
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.Header.SetMethod(fasthttp.MethodPost)
				req.SetRequestURI("http://pdlb:8000/generate")
				req.Header.DisableNormalizing() // the spellings as the test wrote them
				for _, kv := range tc.sent {
					req.Header.Add(kv[0], kv[1])
				}
				req.SetBodyString(`{"text": "a"}`)
				if err := h.cl.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != fasthttp.StatusOK {
					t.Fatalf("got %d %s %v", resp.StatusCode(), resp.Body(), err)
				}
				want := tc.want
				if want == "" {
					want = string(resp.Header.Peek("X-Request-Id")) // pdlb's, answered
				}
				for range 2 { // the prefill's may come after the answer
					select {
					case got := <-ids:
						if got != want {
							t.Fatalf("a worker got X-Request-Id %q; want %q once", got, want)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("a worker got no request")
					}
				}
			})
		})
	}
}

// A header name that is not an RFC 9110 token gets a 400 on every route,
// and nothing reaches a worker: fasthttp reads "X Evil: 1" as a header,
// and pdlb forwarded it (issue 19).
func TestHeaderNamesMustBeTokens(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var reached sync.Map
		record := func(path string, _ []byte) { reached.Store(path, true) }
		h.pair(fake.Config{OnRequest: record}, fake.Config{OnRequest: record})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // so that /flush_cache would reach the workers
		srv := h.start(cfg)
		// fasthttp refuses the other characters that are not a token's; it
		// takes a space inside a name as part of it.
		names := []string{"X Evil", "Content Length", "Transfer Encoding", "X-A  B"}
		for _, name := range names {
			for _, route := range []string{"POST /generate", "POST /v1/chat/completions", "GET /v1/models", "POST /flush_cache",
				"GET /health", "GET /metrics", "GET /nowhere"} {
				method, path, _ := strings.Cut(route, " ")
				status, body := rawRequest(t, h, method+" "+path+" HTTP/1.1\r\nHost: pdlb\r\n"+name+": 1\r\n"+
					"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\": \"a\"}")
				msg := gjson.GetBytes(body, "error.message").String()
				if status != fasthttp.StatusBadRequest || !strings.Contains(msg, strconv.Quote(name)) || !strings.Contains(msg, "RFC 9110") {
					t.Errorf("%s with header %q: got %d %s; want a 400 naming it", route, name, status, body)
				}
			}
		}
		reached.Range(func(path, _ any) bool {
			t.Errorf("a worker got %s", path)
			return true
		})
		if got, want := srv.errorsByReason[reasonInvalidRequest].Get(), uint64(len(names)*7); got != want {
			t.Errorf("got %d invalid requests in the metrics; want %d", got, want)
		}
		// Tokens pass: every character RFC 9110 allows.
		if status, body := rawRequest(t, h, "GET /health HTTP/1.1\r\nHost: pdlb\r\nX-!#$%&'*+-.^_`|~09az: 1\r\n\r\n"); status != fasthttp.StatusOK {
			t.Errorf("a header name of every token character: got %d %s; want 200", status, body)
		}
	})
}

// rawRequest writes raw, a whole request, on a new connection to pdlb and
// returns the answer's status and body.
func rawRequest(t *testing.T, h *harness, raw string) (int, []byte) {
	t.Helper()
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(conn)); err != nil {
		t.Fatalf("%q: %s", raw, err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}
