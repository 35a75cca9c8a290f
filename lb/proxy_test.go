package lb

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// bodies records the generate bodies a fake server received.
type bodies struct {
	mu  sync.Mutex
	all [][]byte
}

func (b *bodies) record(path string, body []byte) {
	if path == "/health" || path == "/server_info" {
		return
	}
	b.mu.Lock()
	b.all = append(b.all, append([]byte(nil), body...))
	b.mu.Unlock()
}

func (b *bodies) only(t *testing.T) []byte {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.all) != 1 {
		t.Fatalf("got %d generate bodies; want 1", len(b.all))
	}
	return b.all[0]
}

func TestGenerateSendsMatchingFieldsToBothLegs(t *testing.T) {
	for _, route := range []string{"/generate", "/v1/completions", "/v1/chat/completions"} {
		t.Run(route, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				var pb, db bodies
				h.pair(fake.Config{OnRequest: pb.record}, fake.Config{OnRequest: db.record})
				h.start(defaultConfig())
				// Numbers written oddly must reach the workers as written, and
				// client-supplied bootstrap fields must be replaced.
				in := `{"model": "m", "text": "Hello", "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}],` +
					` "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}, "max_tokens": 4, "weird": 1.50e3,` +
					` "bootstrap_room": 7, "bootstrap_host": "client"}`
				r := h.post(route, in)
				if r.status != fasthttp.StatusOK {
					t.Fatalf("got status %d: %s", r.status, r.body)
				}
				p, d := pb.only(t), db.only(t)
				if !bytes.Equal(p, d) {
					t.Fatalf("the legs got different bodies:\nprefill %s\ndecode  %s", p, d)
				}
				if !bytes.Contains(p, []byte(`"weird": 1.50e3`)) || !bytes.Contains(p, []byte(`"temperature": 0.0`)) {
					t.Fatalf("client bytes were not preserved: %s", p)
				}
				if host := gjson.GetBytes(p, "bootstrap_host").String(); host != "prefill-0" {
					t.Fatalf("got bootstrap_host %q; want prefill-0", host)
				}
				if port := gjson.GetBytes(p, "bootstrap_port").Raw; port != "8998" {
					t.Fatalf("got bootstrap_port %s; want 8998", port)
				}
				room := gjson.GetBytes(p, "bootstrap_room")
				if room.Type != gjson.Number || strings.ContainsAny(room.Raw, ".eE-") || room.Raw == "7" {
					t.Fatalf("got bootstrap_room %s; want a fresh non-negative integer", room.Raw)
				}
				if n := strings.Count(string(p), `"bootstrap_room"`); n != 1 {
					t.Fatalf("bootstrap_room appears %d times in %s", n, p)
				}
			})
		})
	}
}

func TestGenerateBatchGetsIndependentRooms(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var db bodies
		h.pair(fake.Config{}, fake.Config{OnRequest: db.record})
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": ["a", "b", "c"], "sampling_params": {"max_new_tokens": 2}}`)
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got status %d: %s", r.status, r.body)
		}
		if n := len(gjson.ParseBytes(r.body).Array()); n != 3 {
			t.Fatalf("got %d answers; want 3: %s", n, r.body)
		}
		d := db.only(t)
		rooms := gjson.GetBytes(d, "bootstrap_room").Array()
		hosts := gjson.GetBytes(d, "bootstrap_host").Array()
		if len(rooms) != 3 || len(hosts) != 3 || hosts[2].String() != "prefill-0" {
			t.Fatalf("got rooms %v hosts %v; want lists of 3", rooms, hosts)
		}
		if rooms[0].Raw == rooms[1].Raw || rooms[1].Raw == rooms[2].Raw {
			t.Fatalf("batch items share a room: %v", rooms)
		}
	})
}

// Python's json.loads, with which SGLang's workers and mini_lb read a body,
// takes UTF-8 bytes that begin with a byte-order mark (as some Windows
// tools write them); so does pdlb, and the workers get the body without it.
func TestBodyWithAByteOrderMark(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var pb, db, ab bodies
		h.pair(fake.Config{OnRequest: pb.record}, fake.Config{OnRequest: db.record})
		h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated, OnRequest: ab.record})
		h.start(fallbackConfig())
		const bom = "\xef\xbb\xbf"
		if r := h.post("/generate", bom+`{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("PD: got %d %s", r.status, r.body)
		}
		if r := h.post("/generate", bom+`{"text": "a"}`, "X-PD-Mode", "decode-only"); r.status != fasthttp.StatusOK {
			t.Fatalf("decode-only: got %d %s", r.status, r.body)
		}
		for role, body := range map[string][]byte{"prefill": pb.only(t), "decode": db.only(t), "fallback": ab.only(t)} {
			if !bytes.HasPrefix(body, []byte(`{"text": "a"`)) {
				t.Fatalf("the %s got %q; want the body without its byte-order mark", role, body)
			}
		}
		if r := h.post("/generate", bom+bom+`{"text": "a"}`); r.status != fasthttp.StatusBadRequest {
			t.Fatalf("two marks: got %d %s; want 400", r.status, r.body)
		}
	})
}

func TestBadBodiesGetJSONErrors(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		for _, body := range []string{"", "not json", "[1, 2]", `"text"`, `{"text": "a"`, `{"a": 1} {}`} {
			r := h.post("/generate", body)
			if r.status != fasthttp.StatusBadRequest {
				t.Fatalf("%q: got status %d; want 400", body, r.status)
			}
			if msg := gjson.GetBytes(r.body, "error.message").String(); msg == "" {
				t.Fatalf("%q: got body %s; want an OpenAI-style error", body, r.body)
			}
		}
		if n := p.Stats().GenerateRequests + d.Stats().GenerateRequests; n != 0 {
			t.Fatalf("%d bad bodies reached the workers", n)
		}
	})
}

func TestDecodeAnswerPassesThrough(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(fasthttp.StatusTeapot)
			ctx.SetContentType("application/x-test")
			ctx.SetBodyString(`{"detail": "short and stout"}`)
		})
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusTeapot || string(r.body) != `{"detail": "short and stout"}` ||
			string(r.header.ContentType()) != "application/x-test" {
			t.Fatalf("got %d %q %s; want the decode's answer as it is", r.status, r.header.ContentType(), r.body)
		}
	})
}

func TestLogprobsAreMerged(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		r := h.post("/generate", `{"input_ids": [5, 6, 7, 8], "return_logprob": true, "sampling_params": {"max_new_tokens": 2}}`)
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got status %d: %s", r.status, r.body)
		}
		got := gjson.GetBytes(r.body, "meta_info.input_token_logprobs").Raw
		// The prefill's four entries, then the decode's own.
		want := `[[null,5,null],[-0.2,6,null],[-0.3,7,null],[-0.4,8,null],[-0.4,8,null]]`
		if got != want {
			t.Fatalf("got input_token_logprobs %s; want %s", got, want)
		}
		if out := gjson.GetBytes(r.body, "meta_info.output_token_logprobs").Raw; out != `[[-0.1,0,null],[-0.2,1,null]]` {
			t.Fatalf("output_token_logprobs changed: %s", out)
		}
		// A batch, each item with its own prompt's.
		r = h.post("/generate", `{"input_ids": [[5, 6, 7, 8], [9, 10]], "return_logprob": true, "sampling_params": {"max_new_tokens": 2}}`)
		if got := gjson.GetBytes(r.body, "#.meta_info.input_token_logprobs.#.1").Raw; r.status != fasthttp.StatusOK || got != `[[5,6,7,8,8],[9,10,10]]` {
			t.Fatalf("got %d, the logprobs of tokens %s; want [[5,6,7,8,8],[9,10,10]]", r.status, got)
		}
	})
}

func TestMergeAnswers(t *testing.T) {
	f := func(prefill, decode, want string) {
		t.Helper()
		if got := string(mergeAnswers(nil, []byte(prefill), []byte(decode))); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
	// Nothing to merge: the decode's bytes stay as they are.
	f(`{"meta_info": {}}`, `{"text": "x",  "meta_info": {"id": 1}}`, `{"text": "x",  "meta_info": {"id": 1}}`)
	f(`[1]`, `[2]`, `[2]`)
	// A batch: item by item.
	f(`[{"meta_info": {"input_token_logprobs": [[1,5,null]]}}, {"meta_info": {"input_token_logprobs": [[2,9,null]]}}]`,
		`[{"meta_info": {"input_token_logprobs": [[3,5,null]]}}, {"meta_info": {"input_token_logprobs": [[4,9,null]]}}]`,
		`[{"meta_info": {"input_token_logprobs": [[1,5,null],[3,5,null]]}}, {"meta_info": {"input_token_logprobs": [[2,9,null],[4,9,null]]}}]`)
	// Empty lists on either side.
	f(`{"meta_info": {"input_token_logprobs": []}}`, `{"meta_info": {"input_token_logprobs": [[1,2,null]]}}`,
		`{"meta_info": {"input_token_logprobs": [[1,2,null]]}}`)
	f(`{"meta_info": {"input_token_logprobs": [[1,2,null]]}}`, `{"meta_info": {"input_token_logprobs": [ ]}}`,
		`{"meta_info": {"input_token_logprobs": [[1,2,null]]}}`)
	// Routed experts: the prefill's bytes, then the decode's beyond them.
	f(`{"meta_info": {"routed_experts": "AAEC"}}`, `{"meta_info": {"routed_experts": "CQkJCQ=="}, "x": 1}`,
		`{"meta_info": {"routed_experts": "AAECCQ=="}, "x": 1}`)
	f(`{"sglext": {"routed_experts": "AAEC"}}`, `{"choices": [], "sglext": {"routed_experts": "CQkJCQ=="}}`,
		`{"choices": [], "sglext": {"routed_experts": "AAECCQ=="}}`)
	// Malformed base64 leaves the answer alone.
	f(`{"meta_info": {"routed_experts": "!!"}}`, `{"meta_info": {"routed_experts": "AAEC"}}`,
		`{"meta_info": {"routed_experts": "AAEC"}}`)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		f := func(method, path string, want int) {
			t.Helper()
			r := h.do(method, path, "")
			if r.status != want || !json.Valid(r.body) || gjson.GetBytes(r.body, "error.code").Int() != int64(want) {
				t.Fatalf("%s %s: got %d %s; want %d with a JSON error", method, path, r.status, r.body, want)
			}
		}
		f(fasthttp.MethodGet, "/nope", fasthttp.StatusNotFound)
		f(fasthttp.MethodGet, "/generate", fasthttp.StatusMethodNotAllowed)
		f(fasthttp.MethodPost, "/health", fasthttp.StatusMethodNotAllowed)
	})
}

// End-to-end headers reach both legs; hop-by-hop ones, including those the
// Connection header names, do not.
func TestHopHeadersAreNotForwarded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		seen := make(chan string, 2)
		record := func(ctx *fasthttp.RequestCtx) {
			hdr := &ctx.Request.Header
			seen <- fmt.Sprintf("end=%s hop=%s keep-alive=%s te=%s", hdr.Peek("X-End"), hdr.Peek("X-Hop"), hdr.Peek("Keep-Alive"), hdr.Peek("Te"))
			ctx.SetBodyString(`{}`)
		}
		h.backend("prefill-0:30000", record)
		h.backend("decode-0:30010", record)
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a"}`, "Connection", "keep-alive, X-Hop", "X-Hop", "1",
			"Keep-Alive", "timeout=5", "Te", "trailers", "X-End", "2")
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		for range 2 {
			if got, want := <-seen, "end=2 hop= keep-alive= te="; got != want {
				t.Fatalf("a leg got %q; want %q", got, want)
			}
		}
	})
}

// stripUnforwarded removes exactly the headers a call must not take from
// its client, whichever of them a request holds, as fasthttp's server
// parses them.
func TestStripUnforwarded(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"X-End: 1\r\nAccept: */*", "Accept: */*|X-End: 1"},
		{"Accept-Encoding: gzip, deflate\r\nX-End: 1", "X-End: 1"},
		{"Connection: keep-alive\r\nAccept-Encoding: gzip\r\nX-End: 1", "X-End: 1"},
		{"Connection: close\r\nX-End: 1", "X-End: 1"},
		{"Connection: close, X-Hop\r\nX-Hop: 1\r\nX-End: 1", "X-End: 1"},
		{"Connection: x-hop\r\nX-Hop: 1\r\nX-End: 1", "X-End: 1"},
		{"Proxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-End: 1", "X-End: 1"},
		{"Proxy-Authenticate: Basic\r\nProxy-Authorization: Basic eA==\r\nX-End: 1", "X-End: 1"},
		{"Te: trailers\r\nTrailer: X-Sum\r\nX-End: 1", "X-End: 1"},
		{"Upgrade: websocket\r\nExpect: 100-continue\r\nX-End: 1", "X-End: 1"},
	} {
		var req fasthttp.Request
		raw := "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\n" + tc.in + "\r\nContent-Length: 2\r\n\r\n{}"
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		stripUnforwarded(&req.Header)
		var kept []string
		for k, v := range req.Header.All() {
			switch string(k) {
			case fasthttp.HeaderHost, fasthttp.HeaderContentType, fasthttp.HeaderContentLength:
			default:
				kept = append(kept, string(k)+": "+string(v))
			}
		}
		slices.Sort(kept)
		if got := strings.Join(kept, "|"); got != tc.want {
			t.Errorf("%q: kept %q; want %q", tc.in, got, tc.want)
		}
		if req.Header.ConnectionClose() {
			t.Errorf("%q: the call would ask the worker to close the connection", tc.in)
		}
	}
}

func TestRequestIDIsEchoedAndForwarded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		ids := make(chan string, 4)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			ids <- "prefill " + string(ctx.Request.Header.Peek("X-Request-Id"))
			ctx.SetBodyString(`{}`)
		})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ids <- "decode " + string(ctx.Request.Header.Peek("X-Request-Id"))
			ctx.SetBodyString(`{}`)
		})
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a"}`, "x-request-id", "abc-123")
		if got := string(r.header.Peek("X-Request-Id")); got != "abc-123" {
			t.Fatalf("got echoed id %q; want abc-123", got)
		}
		got := []string{<-ids, <-ids}
		if !(got[0] == "prefill abc-123" && got[1] == "decode abc-123" || got[1] == "prefill abc-123" && got[0] == "decode abc-123") {
			t.Fatalf("legs got ids %q", got)
		}
		r = h.post("/generate", `{"text": "a"}`)
		generated := string(r.header.Peek("X-Request-Id"))
		if len(generated) != 16 {
			t.Fatalf("got generated id %q; want 16 hex digits", generated)
		}
		if a, b := <-ids, <-ids; !strings.HasSuffix(a, generated) || !strings.HasSuffix(b, generated) {
			t.Fatalf("legs got %q and %q; want %q", a, b, generated)
		}
	})
}

// sglang_router's --request-id-headers: the ID comes from the first listed
// header the client sent, and goes on as X-Request-Id.
func TestRequestIDHeaders(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		ids := make(chan string, 2)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ids <- string(ctx.Request.Header.Peek("X-Request-Id"))
			ctx.SetBodyString(`{}`)
		})
		cfg := defaultConfig()
		cfg.RequestIDHeaders = []string{"X-Trace-Id", "X-Correlation-Id"}
		h.start(cfg)
		for _, c := range []struct {
			headers []string
			want    string
		}{
			{[]string{"x-correlation-id", "c-1", "x-trace-id", "t-1"}, "t-1"},
			{[]string{"X-Correlation-Id", "c-2"}, "c-2"},
			{[]string{"X-Trace-Id", "has space", "X-Correlation-Id", "c-3"}, "c-3"},
		} {
			r := h.post("/generate", `{"text": "a"}`, c.headers...)
			if got, worker := string(r.header.Peek("X-Request-Id")), <-ids; got != c.want || worker != c.want {
				t.Errorf("%q: got id %q, the decode %q; want %q", c.headers, got, worker, c.want)
			}
		}
		// X-Request-Id is no longer read: the ID is drawn.
		r := h.post("/generate", `{"text": "a"}`, "X-Request-Id", "r-1")
		if got, worker := string(r.header.Peek("X-Request-Id")), <-ids; len(got) != 16 || worker != got {
			t.Errorf("got id %q, the decode %q; want a drawn one on both", got, worker)
		}
		if _, err := New(Config{Prefill: cfg.Prefill, Decode: cfg.Decode, RequestIDHeaders: []string{"X-Bad Name"}}, zerolog.Nop()); err == nil {
			t.Error("a header name with a space was accepted")
		}
	})
}

func TestOversizedRequests(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 1024
		cfg.MaxHeaderSize = 4096
		h.start(cfg)
		r := h.post("/generate", `{"text": "`+strings.Repeat("a", 2048)+`"}`)
		if r.status != fasthttp.StatusRequestEntityTooLarge || gjson.GetBytes(r.body, "error.code").Int() != 413 {
			t.Fatalf("got %d %s; want a 413 JSON error", r.status, r.body)
		}
		if status, body := h.postBigHeader(8192); status != fasthttp.StatusRequestHeaderFieldsTooLarge || gjson.GetBytes(body, "error.code").Int() != 431 {
			t.Fatalf("got %d %s; want a 431 JSON error", status, body)
		}
	})
}

// postBigHeader posts a request whose header holds size bytes and returns
// pdlb's answer.
func (h *harness) postBigHeader(size int) (int, []byte) {
	h.t.Helper()
	return h.sendRaw("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nContent-Length: 13\r\n" +
		"X-Big: " + strings.Repeat("b", size) + "\r\n\r\n" + `{"text": "a"}`)
}

// sendRaw writes req, as it is, on a new connection to pdlb and returns
// pdlb's answer. pdlb may answer and close before the request is all
// written, which fails a normal client's write, so the request is written
// on the side and the answer read meanwhile.
func (h *harness) sendRaw(req string) (int, []byte) {
	h.t.Helper()
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = conn.Write([]byte(req))
	}()
	var resp fasthttp.Response
	err = resp.Read(bufio.NewReader(conn))
	conn.Close()
	<-written
	if err != nil {
		h.t.Fatalf("cannot read the answer to %.40q: %v", req, err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// A request pdlb cannot read gets an error that says why without repeating
// the request, in its answer or its access-log line: fasthttp's own
// messages quote the request, credentials included.
func TestUnreadableRequestsAreNotEchoed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.AccessLog = true
		var logs syncBuffer
		h.startLogged(cfg, zerolog.New(&logs)) // at debug level, with fasthttp's own lines
		const secret = "S3CRET-0b5e"
		for _, c := range []struct {
			req    string
			status int
			says   string
		}{
			{"POST /generate HTTP/1.1\r\nHost: pdlb\r\nAuthorization: Bearer " + secret + strings.Repeat("x", 8192) + "\r\n\r\n",
				fasthttp.StatusRequestHeaderFieldsTooLarge, "larger than the 4096 bytes allowed (--max-header-size)"},
			{"POST/generate?key=" + secret + "\r\nHost: pdlb\r\n\r\n",
				fasthttp.StatusBadRequest, `cannot find http request method in "…"`},
			{"POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: " + secret + "\r\n\r\n",
				fasthttp.StatusBadRequest, "cannot read request"},
		} {
			status, body := h.sendRaw(c.req)
			msg := gjson.GetBytes(body, "error.message").String()
			if status != c.status || !strings.Contains(msg, c.says) || strings.Contains(string(body), secret) {
				t.Errorf("%.60q: got %d %s; want %d saying %q, without the secret", c.req, status, body, c.status, c.says)
			}
		}
		if n := strings.Count(logs.String(), `"message":"request"`); n != 3 || strings.Contains(logs.String(), secret) {
			t.Errorf("got %d access-log lines; want 3, without the secret:\n%s", n, logs.String())
		}
	})
}

func TestMaxHeaderSizeRaisesTheLimit(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxHeaderSize = 16 << 10
		h.start(cfg)
		r := h.post("/generate", `{"text": "a"}`, "X-Big", strings.Repeat("b", 8192))
		if r.status != fasthttp.StatusOK {
			t.Fatalf("an 8 KiB header under a 16 KiB limit got %d %s; want 200", r.status, r.body)
		}
		if status, body := h.postBigHeader(20 << 10); status != fasthttp.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 20 KiB header under a 16 KiB limit got %d %s; want 431", status, body)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger writing from several
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Every request gets one access-log line when it is on, and none when it
// is off: answered by a pair or a fallback worker, refused by pdlb itself,
// or on a control route. Each line names the workers the request went to,
// and only those.
func TestAccessLog(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for _, on := range []bool{false, true} {
			h := newHarness(t)
			h.pair(fake.Config{}, fake.Config{})
			h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated})
			cfg := fallbackConfig()
			cfg.AccessLog = on
			cfg.MaxRequestBodySize = 1024
			cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
			var logs syncBuffer
			srv := h.startLogged(cfg, zerolog.New(&logs))
			h.post("/generate", `{"text": "a"}`, "X-Request-Id", "pd")
			h.openStream("/generate", `{"text": "a", "stream": true}`).rest()
			h.post("/generate", `{"text": "a"}`, "X-Request-Id", "fallback", "X-PD-Mode", "decode-only")
			h.post("/generate", `{"text": `, "X-Request-Id", "invalid")
			h.do(fasthttp.MethodGet, "/nothing", "", "X-Request-Id", "no-route")
			h.do(fasthttp.MethodGet, "/health", "", "X-Request-Id", "control")
			h.post("/flush_cache?timeout=soon", "", "X-Request-Id", "control-error")
			h.post("/generate", `{"text": "`+strings.Repeat("a", 2048)+`"}`, "X-Request-Id", "too-large")
			waitIdle(t, srv) // a stream is logged once it is over, after its last byte

			got := map[string]string{}
			streams := 0
			for line := range strings.Lines(logs.String()) {
				if gjson.Get(line, "message").String() != "request" {
					continue
				}
				if gjson.Get(line, "stream").Bool() {
					streams++
					continue
				}
				got[gjson.Get(line, "request_id").String()] = line
			}
			if !on {
				if len(got)+streams > 0 {
					t.Fatalf("access log off: got lines:\n%s", logs.String())
				}
				continue
			}
			if streams != 1 || len(got) != 7 {
				t.Fatalf("got %d stream lines and %d others; want 1 and 7:\n%s", streams, len(got), logs.String())
			}
			for id, want := range map[string]struct {
				route            string
				status           int
				prefill, decode  string
				fallback, errMsg string
			}{
				"pd":            {route: "/generate", status: 200, prefill: "prefill-0:30000", decode: "decode-0:30010"},
				"fallback":      {route: "/generate", status: 200, fallback: "agg-0:30020"},
				"invalid":       {route: "/generate", status: 400, errMsg: "not valid JSON"},
				"no-route":      {route: "/nothing", status: 404, errMsg: "no route"},
				"control":       {route: "/health", status: 200},
				"control-error": {route: "/flush_cache", status: 400, errMsg: "timeout must be a number"},
				"too-large":     {route: "/generate", status: 413, errMsg: "larger than the 1024 bytes allowed"},
			} {
				line := got[id]
				if gjson.Get(line, "route").String() != want.route || gjson.Get(line, "status").Int() != int64(want.status) ||
					!gjson.Get(line, "took").Exists() || gjson.Get(line, "prefill").String() != want.prefill ||
					gjson.Get(line, "decode").String() != want.decode || gjson.Get(line, "fallback").String() != want.fallback ||
					!strings.Contains(gjson.Get(line, "error").String(), want.errMsg) || (want.errMsg == "") != !gjson.Get(line, "error").Exists() {
					t.Fatalf("request %s: got access log line %s; want %+v", id, line, want)
				}
			}
		}
	})
}

// The access log is written whatever the logger's level: its lines are
// info-level events, which --log-level warn used to drop, leaving an
// operator who asked for --access-log with none.
func TestAccessLogIgnoresTheLogLevel(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.AccessLog = true
		var logs syncBuffer
		h.startLogged(cfg, zerolog.New(&logs).Level(zerolog.WarnLevel))
		h.post("/generate", `{"text": "a"}`, "X-Request-Id", "pd")
		h.post("/generate", `{"text": `, "X-Request-Id", "invalid")
		h.do(fasthttp.MethodGet, "/generate", "", "X-Request-Id", "wrong-method")
		h.do(fasthttp.MethodGet, "/nothing", "", "X-Request-Id", "no-route")
		h.do(fasthttp.MethodGet, "/health", "", "X-Request-Id", "control")
		h.sendRaw("POST/generate\r\nHost: pdlb\r\n\r\n") // unread: its ID is pdlb's
		got := map[string]int{}
		n := 0
		for line := range strings.Lines(logs.String()) {
			if gjson.Get(line, "message").String() == "request" {
				n++
				got[gjson.Get(line, "request_id").String()]++
				if level := gjson.Get(line, "level").String(); level != "info" {
					t.Errorf("got level %q in %s; want info", level, line)
				}
			}
		}
		for _, id := range []string{"pd", "invalid", "wrong-method", "no-route", "control"} {
			if got[id] != 1 {
				t.Errorf("request %s: got %d access lines; want 1", id, got[id])
			}
		}
		if n != 6 {
			t.Errorf("got %d access lines; want 6:\n%s", n, logs.String())
		}
		if strings.Contains(logs.String(), `"level":"debug"`) {
			t.Errorf("got debug lines under a warn logger:\n%s", logs.String())
		}
	})
}

func TestReadErrorMessage(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		for in, want := range map[string]string{
			`error when reading request headers: unsupported transfer-encoding: "xchunked": buffer size=180, contents: "POST / HTTP/1.1"`: `error when reading request headers: unsupported transfer-encoding: "…"`,
			`error when reading response headers: forbidden trailer key "Host"`:                                                           `error when reading request trailers: forbidden trailer key "…"`,
			`cannot parse chunk size`: `cannot parse chunk size`,
		} {
			if got := readErrorMessage(errors.New(in)); got != want {
				t.Errorf("readErrorMessage(%q) = %q; want %q", in, got, want)
			}
		}
		h := newHarness(t)
		h.start(defaultConfig())
		status, body := h.sendRaw("POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n")
		if msg := gjson.GetBytes(body, "error.message").String(); status != fasthttp.StatusBadRequest ||
			!strings.Contains(msg, "unsupported transfer-encoding") || strings.Contains(msg, "buffer size") {
			t.Fatalf("got %d %s; want a 400 naming the transfer-encoding, without fasthttp's buffer", status, body)
		}
	})
}

func TestRedactQuoted(t *testing.T) {
	for in, want := range map[string]string{
		`no quotes`:                         `no quotes`,
		`bad value "Bearer k" in "GET / x"`: `bad value "…" in "…"`,
		`escaped "a\"b\\" end`:              `escaped "…" end`,
		`unterminated "abc`:                 `unterminated "…"`,
		`trailing backslash "abc\`:          `trailing backslash "…"`,
	} {
		if got := redactQuoted(in); got != want {
			t.Errorf("redactQuoted(%q) = %q; want %q", in, got, want)
		}
	}
}

// A compressed body is refused by name (415), before any worker sees it:
// neither pdlb nor SGLang's workers decode it, and the JSON error would
// not say why. "identity" is no encoding.
func TestCompressedBodyIsRefused(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		for _, route := range []string{"/generate", "/v1/completions"} {
			r := h.post(route, "\x1f\x8b\x08\x00", "Content-Encoding", "gzip")
			if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusUnsupportedMediaType ||
				!strings.Contains(msg, `Content-Encoding "gzip"`) {
				t.Fatalf("%s: got %d %s; want a 415 naming the encoding", route, r.status, r.body)
			}
		}
		if p.Stats().Generate+d.Stats().Generate != 0 {
			t.Fatal("a worker got a compressed body")
		}
		if r := h.post("/generate", `{"text": "a"}`, "Content-Encoding", "Identity"); r.status != fasthttp.StatusOK {
			t.Fatalf("identity: got %d %s", r.status, r.body)
		}
	})
}

// Python clients write float("-inf") as -Infinity, and SGLang's workers
// read it (json.loads): pdlb passes such a body on, as mini_lb does.
func TestBodyWithPythonNumbers(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		bodies := make(chan string, 2)
		record := func(ctx *fasthttp.RequestCtx) {
			bodies <- string(ctx.PostBody())
			ctx.SetBodyString(`{}`)
		}
		h.backend("prefill-0:30000", record)
		h.backend("decode-0:30010", record)
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a", "sampling_params": {"logit_bias": {"5": -Infinity}, "temperature": NaN}}`)
		if r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		for range 2 {
			if b := <-bodies; !strings.Contains(b, `{"logit_bias": {"5": -Infinity}, "temperature": NaN}`) {
				t.Fatalf("a worker got %s; want the numbers as sent", b)
			}
		}
	})
}

// Requests pdlb cannot read whole are counted in pdlb_requests_total, as
// every request is: under their route (a declared body over the limit), or
// under "unread" when fasthttp could not read the start of the body (its
// first 8 KiB), which takes the header with it. A client that leaves in
// the middle of its body is gone (499), not a bad request, and one that
// only shut its writing side reads no answer.
func TestUnreadRequestsAreCounted(t *testing.T) {
	h := newHarness(t)
	h.pair(fake.Config{}, fake.Config{})
	cfg := defaultConfig()
	cfg.MaxRequestBodySize = 64
	srv := h.start(cfg)
	if status, _ := h.sendRaw("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat(" ", 100)); status != fasthttp.StatusRequestEntityTooLarge {
		t.Fatalf("got %d; want 413", status)
	}
	conn, err := net.Dial("tcp", h.serveTCP(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"text\":")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(conn); err != nil || len(got) > 0 {
		t.Fatalf("got %q, %v; want the connection closed with no answer", got, err)
	}
	for metric, want := range map[string]string{
		`pdlb_requests_total{route="/generate",code="413"}`: "1",
		`pdlb_requests_total{route="unread",code="499"}`:    "1",
		`pdlb_request_errors_total{reason="client_gone"}`:   "1",
	} {
		if got := h.metric(metric); got != want {
			t.Errorf("%s is %q; want %s", metric, got, want)
		}
	}
}
