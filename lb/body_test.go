package lb

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/bootstrap"
)

// openBody connects to pdlb and sends a request declaring a body of
// declared bytes, of which it sends sent (each a space: a JSON body
// padded). The connection is closed when the test ends.
func (h *harness) openBody(declared, sent int) net.Conn {
	h.t.Helper()
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	head := fmt.Sprintf("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
	go func() { _, _ = conn.Write([]byte(head + strings.Repeat(" ", sent))) }()
	return conn
}

// waitMemory waits (settled) until pdlb holds want bytes of body memory.
func (h *harness) waitMemory(want int64) {
	h.t.Helper()
	settled(h.tt(), fmt.Sprintf("%d bytes of body memory", want), func() bool { return h.srv.memory.used.Load() == want })
}

// Issue 19, item 1: a declared Content-Length was allocated before the
// body arrived, and two connections that sent a hundred bytes each took
// pdlb from 16 MB to 653 MB. Memory now grows with what arrives.
func TestDeclaredBodyIsNotAllocated(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 256 << 20
		h.start(cfg)
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const conns = 8
		for range conns {
			h.openBody(256<<20-1, 9<<10) // past the 8 KiB fasthttp reads before pdlb
		}
		h.waitMemory(conns * 16 << 10) // the buffer size that holds the 9 KiB come
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 64<<20 {
			t.Fatalf("the heap grew by %d MiB for %d bodies declared at 256 MiB, of which 9 KiB came", grown>>20, conns)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("a client beside them got %d %s", r.status, r.body)
		}
	})
}

// Issue 19, item 1: the bodies in flight together stay within
// --max-body-memory; a request that would cross it gets a 503 at once, its
// connection closed, and is served once memory frees up.
func TestBodyMemoryIsABudget(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 256 << 10
		cfg.MaxBodyMemory = cfg.minBodyMemory() // about 1 MiB
		h.start(cfg)
		var holders []net.Conn
		for i := range 3 { // each holds a buffer of 256 KiB, the body's declared length
			holders = append(holders, h.openBody(256<<10, 200<<10))
			// One at a time: a buffer that grows holds its old size too for a
			// moment, and three growing at once could cross the budget.
			h.waitMemory(int64(i+1) * 256 << 10)
		}
		body := `{"text": "a"` + strings.Repeat(" ", 250<<10) + `}`
		r := h.post("/generate", body)
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(gjson.GetBytes(r.body, "error.message").String(), "--max-body-memory") {
			t.Fatalf("got %d %s; want a 503 naming --max-body-memory", r.status, r.body)
		}
		if !r.header.ConnectionClose() {
			t.Fatal("the connection of the refused request stays open")
		}
		if got := h.metric(`pdlb_request_errors_total{reason="body_memory"}`); got != "1" {
			t.Fatalf("got %q body_memory errors; want 1", got)
		}
		for _, c := range holders {
			c.Close()
		}
		h.waitMemory(0)
		if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
			t.Fatalf("once memory is free: got %d %s", r.status, r.body)
		}
		h.waitMemory(0)
	})
}

// The copy of a body rewritten for a PD pair is held in the budget while
// its calls run, and given back after.
func TestRewrittenBodiesAreBudgeted(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		release := make(chan struct{})
		arrived := make(chan struct{}, 4)
		hold := func(ctx *fasthttp.RequestCtx) {
			arrived <- struct{}{}
			<-release
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "b", "meta_info": {}}`)
		}
		h.backend("prefill-0:30000", hold)
		h.backend("decode-0:30010", hold)
		h.start(defaultConfig())
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock) // before pdlb's shutdown, should the test fail
		body := `{"text": "` + strings.Repeat("a", 30<<10) + `"}`
		done := make(chan reply)
		go func() { done <- h.post("/generate", body) }()
		<-arrived
		<-arrived
		// The client's body (in the 32 KiB buffer that holds it) and one copy
		// for both workers.
		h.waitMemory(int64(32<<10 + len(body) + bootstrap.MaxAdded("prefill-0", -1)))
		unblock()
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		h.waitMemory(0)
	})
}

// Issue 19, item 3: a batch of millions of empty items grew 13.6 times on
// its way to the workers, and a 90 MB one crashed pdlb. Batches above
// --max-batch-size get a 400 before anything is written for them.
func TestBatchSizeIsBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxBatchSize = 8
		h.start(cfg)
		batch := func(n int) string {
			return `{"input_ids": [` + strings.TrimSuffix(strings.Repeat("[1],", n), ",") + `]}`
		}
		r := h.post("/generate", batch(9))
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadRequest ||
			!strings.Contains(msg, "batch of 9 items") || !strings.Contains(msg, "--max-batch-size") {
			t.Fatalf("9 items: got %d %s; want a 400 naming --max-batch-size", r.status, r.body)
		}
		if n := p.Stats().Generate + d.Stats().Generate; n != 0 {
			t.Fatalf("the workers got %d requests for a refused batch", n)
		}
		if r := h.post("/generate", batch(8)); r.status != fasthttp.StatusOK {
			t.Fatalf("8 items: got %d %s", r.status, r.body)
		}
		// The OpenAI routes take no batch: a list there is the client's to send.
		if r := h.post("/v1/completions", `{"prompt": [`+strings.TrimSuffix(strings.Repeat(`"a",`, 9), ",")+`]}`); r.status != fasthttp.StatusOK {
			t.Fatalf("/v1/completions with 9 prompts: got %d %s", r.status, r.body)
		}
	})
}

// sendChunked writes a chunked request to pdlb, its body in pieces of
// chunk bytes and then trailer, and returns the answer.
func (h *harness) sendChunked(body string, chunk int, trailer string) (int, *fasthttp.ResponseHeader, []byte) {
	h.t.Helper()
	var req strings.Builder
	req.WriteString("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	for rest := body; len(rest) > 0; {
		n := min(chunk, len(rest))
		fmt.Fprintf(&req, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	req.WriteString("0\r\n" + trailer + "\r\n")
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = conn.Write([]byte(req.String())) }()
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(conn)); err != nil {
		h.t.Fatalf("cannot read the answer: %v", err)
	}
	header := &fasthttp.ResponseHeader{}
	resp.Header.CopyTo(header)
	return resp.StatusCode(), header, append([]byte(nil), resp.Body()...)
}

// Issue 19, items 2 and 9: a chunked body is read as a fixed-length one is
// (whole, up to --max-payload-size, a 413 past it), and its trailer fields
// never reach the workers as header fields.
func TestChunkedBodies(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		headers := make(chan string, 2)
		bodies := make(chan string, 2)
		record := func(ctx *fasthttp.RequestCtx) {
			headers <- ctx.Request.Header.String()
			bodies <- string(ctx.PostBody())
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "b", "meta_info": {}}`)
		}
		h.backend("prefill-0:30000", record)
		h.backend("decode-0:30010", record)
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 128 << 10
		h.start(cfg)
		text := strings.Repeat("a", 100<<10)
		status, _, body := h.sendChunked(`{"text": "`+text+`"}`, 1000, "X-Evil: 1\r\nX-Request-Id: smuggled\r\n")
		if status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", status, body)
		}
		for range 2 {
			if got := <-headers; strings.Contains(got, "X-Evil") || strings.Contains(got, "smuggled") {
				t.Fatalf("a worker got the client's trailer as header fields:\n%s", got)
			}
			if got := gjson.Get(<-bodies, "text").String(); got != text {
				t.Fatalf("a worker got a text of %d bytes; want %d", len(got), len(text))
			}
		}
		status, header, body := h.sendChunked(`{"text": "`+text+text+`"}`, 1000, "")
		if status != fasthttp.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-payload-size") || !header.ConnectionClose() {
			t.Fatalf("a chunked body over the limit: got %d %s; want a 413 closing the connection", status, body)
		}
		h.waitMemory(0)
	})
}

// A client that sends the rest of a large body too slowly gets a 408 from
// pdlb's own reading (fasthttp reads only the first 8 KiB), its connection
// closed.
func TestSlowBodyTimesOut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.ClientReadTimeout = 200 * time.Millisecond
		h.start(cfg)
		conn := h.openBody(100<<10, 20<<10)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("cannot read the answer: %v", err)
		}
		if resp.StatusCode() != fasthttp.StatusRequestTimeout || !resp.ConnectionClose() ||
			!strings.Contains(string(resp.Body()), "--client-read-timeout-secs") {
			t.Fatalf("got %d %s; want a 408 closing the connection", resp.StatusCode(), resp.Body())
		}
		h.waitMemory(0)
	})
}

// A control route's body is read within maxControlBody, chunked or not,
// before its rules look at it: an /abort_request's decides whether it is
// an operator's.
func TestControlBodyIsBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		r := h.post("/abort_request", `{"rid": "request-x", "pad": "`+strings.Repeat(" ", maxControlBody)+`"}`)
		if r.status != fasthttp.StatusRequestEntityTooLarge || !r.header.ConnectionClose() {
			t.Fatalf("a large body: got %d %s; want a 413 closing the connection", r.status, r.body)
		}
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, _ = conn.Write([]byte("POST /abort_request HTTP/1.1\r\nHost: pdlb\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"5\r\n{\"rid\r\nf\r\n\": \"request-x\"}\r\n0\r\n\r\n"))
		}()
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("a chunked abort by rid: got %d %s, %v", resp.StatusCode(), resp.Body(), err)
		}
		if n := p.Stats().AbortRequest + d.Stats().AbortRequest; n != 2 {
			t.Fatalf("the workers got %d aborts; want one each", n)
		}
		h.waitMemory(0)
	})
}

// A body cut off before its declared length is the client's leaving (a
// 499), not a body to parse: fasthttp's stream ends it as if it were whole.
func TestCutBodyIsClientGone(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		conn := h.openBody(100<<10, 20<<10)
		h.waitMemory(32 << 10) // pdlb is reading it
		conn.Close()
		synctest.Wait() // pdlb's read of the body has failed, and it has answered
		if h.metric(`pdlb_requests_total{route="/generate",code="499"}`) != "1" {
			t.Fatalf("the cut body was not accounted as a 499; 400s: %q", h.metric(`pdlb_requests_total{route="/generate",code="400"}`))
		}
		if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "1" {
			t.Fatalf("got %q client_gone errors; want 1", got)
		}
		if n := p.Stats().Generate + d.Stats().Generate; n != 0 {
			t.Fatalf("the workers got %d requests for a cut body", n)
		}
		h.waitMemory(0)
	})
}

// A chunked body's framing may not outgrow its data: fasthttp reads chunk
// extensions without a bound, and 10 MB of them a chunk cost pdlb 33
// CPU-seconds for a body of a kilobyte. Framing within reason (small
// chunks, short extensions) is read as before.
func TestChunkFramingIsBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		send := func(framing string) (int, []byte) {
			t.Helper()
			req := "POST /generate HTTP/1.1\r\nHost: pdlb\r\nTransfer-Encoding: chunked\r\n\r\n" + framing + "0\r\n\r\n"
			return h.sendRaw(req)
		}
		// One-byte chunks with extensions: a body's worth of framing.
		var small strings.Builder
		for _, c := range `{"text": "a"}` {
			fmt.Fprintf(&small, "1;ext=value\r\n%c\r\n", c)
		}
		if status, body := send(small.String()); status != fasthttp.StatusOK {
			t.Fatalf("small chunks with extensions: got %d %s", status, body)
		}
		huge := "d;ext=" + strings.Repeat("x", 1<<20) + "\r\n" + `{"text": "a"}` + "\r\n"
		if status, body := send(huge); status != fasthttp.StatusBadRequest || !strings.Contains(string(body), "framing") {
			t.Fatalf("a chunk with 1 MiB of extension: got %d %s; want a 400 about the framing", status, body)
		}
		// Extensions of 60 KB a chunk, each within a read's allowance, add up.
		var many strings.Builder
		for _, c := range `{"text": "a"}` {
			fmt.Fprintf(&many, "1;ext=%s\r\n%c\r\n", strings.Repeat("x", 60000), c)
		}
		if status, body := send(many.String()); status != fasthttp.StatusBadRequest || !strings.Contains(string(body), "framing") {
			t.Fatalf("13 chunks with 60 KB of extension each: got %d %s; want a 400 about the framing", status, body)
		}
		h.waitMemory(0)
	})
}

// Issue 19's review: the workers' answers are as large as a client asks
// (max_new_tokens, n, return_logprob), and sixteen answers of 190 MB took
// pdlb out of memory. An answer is read within --max-body-memory too: one
// that does not fit gets the client a 503 of pdlb's, with the worker not
// blamed, and its memory is given back.
func TestAnswersAreBudgeted(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		large := `{"text": "` + strings.Repeat("x", 1<<20) + `", "meta_info": {}}`
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "", "meta_info": {}}`)
		})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			if strings.Contains(string(ctx.PostBody()), "large") {
				ctx.SetBodyString(large)
				return
			}
			ctx.SetBodyString(`{"text": "small", "meta_info": {}}`)
		})
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 64 << 10
		cfg.MaxBodyMemory = cfg.minBodyMemory() // about 500 KiB
		cfg.Breaker = BreakerConfig{Threshold: 1}
		srv := h.start(cfg)
		r := h.post("/generate", `{"text": "large"}`)
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusServiceUnavailable ||
			!strings.Contains(msg, "--max-body-memory") || !strings.Contains(msg, "decode backend") {
			t.Fatalf("an answer larger than the body memory: got %d %.300s; want a 503 naming --max-body-memory", r.status, r.body)
		}
		if got := h.metric(`pdlb_request_errors_total{reason="body_memory"}`); got != "1" {
			t.Fatalf("got %q body_memory errors; want 1", got)
		}
		h.waitMemory(0)
		// Not the worker's failure: with a breaker of one failure, it still serves.
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || !strings.Contains(string(r.body), "small") {
			t.Fatalf("the next request got %d %s", r.status, r.body)
		}
		waitIdle(t, srv)
	})
}

// A client that asked for logprobs, which only the prefill's answer
// holds, is told when pdlb could not hold that answer, not handed the
// decode's answer without them (issue 19's review: a 200 with one entry of
// 300,001, and nothing logged).
func TestUnmergeableAnswerIsAnError(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		large := `{"text": "", "meta_info": {"input_token_logprobs": [` + strings.TrimSuffix(strings.Repeat(`[-0.5, 1, null],`, 80000), ",") + `]}}`
		decoded := make(chan struct{})
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			<-decoded // the decode's answer is in: its call cannot be cancelled
			ctx.SetContentType("application/json")
			ctx.SetBodyString(large)
		})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "b", "meta_info": {"input_token_logprobs": [[-0.1, 2, null]]}}`)
		})
		cfg := defaultConfig()
		cfg.MaxRequestBodySize = 64 << 10
		cfg.MaxBodyMemory = cfg.minBodyMemory() // less than the prefill's answer
		srv := h.start(cfg)
		got := make(chan reply, 1)
		go func() { got <- h.post("/generate", `{"text": "a", "return_logprob": true}`) }()
		d := srv.decodes.backends()[0]
		waitFor(t, "the decode's call to end", func() bool { return d.requests.Get() == 1 && d.inflight.Load() == 0 })
		close(decoded)
		r := <-got
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusServiceUnavailable ||
			!strings.Contains(msg, "prefill backend") || !strings.Contains(msg, "--max-body-memory") {
			t.Fatalf("got %d %.300s; want a 503 saying the prefill's answer did not fit", r.status, r.body)
		}
		waitIdle(t, srv)
	})
}

// A worker's answer larger than Config.MaxResponseBodySize is its failure
// (a 502), whether pdlb reads it or, declared so, refuses it at its header,
// and holds no body memory after.
func TestAnswerOverTheLimitIsAFailure(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "", "meta_info": {}}`)
		})
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "` + strings.Repeat("x", 100<<10) + `", "meta_info": {}}`)
		})
		cfg := defaultConfig()
		cfg.MaxResponseBodySize = 64 << 10
		srv := h.start(cfg)
		r := h.post("/generate", `{"text": "a"}`)
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadGateway || !strings.Contains(msg, "larger than the limit") {
			t.Fatalf("got %d %.200s; want a 502 saying the answer is larger than the limit", r.status, r.body)
		}
		waitIdle(t, srv)
	})
}
