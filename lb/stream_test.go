package lb

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
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
)

// stream is a streamed answer from pdlb, read event by event.
type stream struct {
	t      testing.TB
	status int
	events chan string
	conn   net.Conn
}

// openStream posts body to pdlb on a connection of its own and returns once
// the response headers are in. Events arrive on s.events as the client
// receives them; the channel closes when the body ends.
func (h *harness) openStream(path, body string) *stream {
	h.t.Helper()
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = conn.Close() })
	sendRequest(h.t, conn, path, body)
	return readStream(h.t, conn, bufio.NewReader(conn))
}

// sendRequest writes a POST of body to path on conn.
func sendRequest(t testing.TB, conn net.Conn, path, body string) {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://pdlb:8000" + path)
	req.SetBodyString(body)
	w := bufio.NewWriter(conn)
	if err := req.Write(w); err != nil || w.Flush() != nil {
		t.Fatalf("cannot send the request: %v", err)
	}
}

// readStream reads the next response on conn through br, returning once its
// headers are in; its events then arrive on s.events. The next response on
// br may be read once s.events has closed.
func readStream(t testing.TB, conn net.Conn, br *bufio.Reader) *stream {
	t.Helper()
	s := &stream{t: t, events: make(chan string, 64), conn: conn}
	resp := &fasthttp.Response{StreamBody: true}
	headers := make(chan error, 1)
	go func() {
		defer close(s.events)
		err := resp.Read(br)
		headers <- err
		if err != nil {
			return
		}
		readEvents(resp, s.events)
	}()
	select {
	case err := <-headers:
		if err != nil {
			t.Fatalf("cannot read the response: %s", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no response headers")
	}
	s.status = resp.StatusCode()
	return s
}

// readEvents sends every blank-line-terminated event of resp's body (and a
// trailing partial one) to events.
func readEvents(resp *fasthttp.Response, events chan<- string) {
	var pending []byte
	buf := make([]byte, 4096)
	body := resp.BodyStream()
	for {
		n, err := body.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := eventEnd(pending)
			if i == 0 {
				break
			}
			events <- string(pending[:i])
			pending = pending[i:]
		}
		if err != nil {
			if len(pending) > 0 {
				events <- string(pending)
			}
			return
		}
	}
}

// next returns the next event, failing the test if none comes in time.
func (s *stream) next() string {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatalf("the stream ended early")
		}
		return ev
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no event within 10 s")
	}
	return ""
}

// none fails the test if an event is already waiting: the one expected next
// has not been produced yet, so pdlb must not have sent it.
func (s *stream) none() {
	s.t.Helper()
	select {
	case ev := <-s.events:
		s.t.Fatalf("got event %q before the decode produced it", ev)
	default:
	}
}

// rest returns the remaining events until the body ends.
func (s *stream) rest() []string {
	s.t.Helper()
	var out []string
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-time.After(10 * time.Second):
			s.t.Fatalf("the stream did not end; got %q so far", out)
		}
	}
}

func TestStreamRelaysEachEventAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		h.start(defaultConfig())
		go func() { gate <- struct{}{} }() // the first token: pdlb answers once it flows
		s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 3}}`)
		if s.status != fasthttp.StatusOK {
			t.Fatalf("got status %d", s.status)
		}
		for i := range 3 {
			ev := s.next()
			if text := gjson.Get(strings.TrimPrefix(ev, "data: "), "text").String(); !strings.HasSuffix(text, "tok"+string(rune('0'+i))) {
				t.Fatalf("event %d: got %q", i, ev)
			}
			if i < 2 {
				s.none()
				gate <- struct{}{}
			}
		}
		if rest := s.rest(); len(rest) != 1 || rest[0] != "data: [DONE]\n\n" {
			t.Fatalf("got %q after the tokens; want [DONE]", rest)
		}
	})
}

// sseBackend answers every request with the given events, written and
// flushed one by one, then ends the body.
func sseBackend(events ...string) fasthttp.RequestHandler {
	return stallingDecode(nil, events...)
}

func TestStreamBytesArePassedAsTheyAre(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		events := []string{"data: {\"a\":1}\n\n", ": keep-alive\n\n", "data:{\"b\":  2.50}\r\n\r\n", "data: [DONE]\n\n"}
		h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
		h.backend("decode-0:30010", sseBackend(events...))
		h.start(defaultConfig())
		s := h.openStream("/v1/completions", `{"prompt": "a", "stream": true}`)
		got := append([]string{s.next()}, s.rest()...)
		if strings.Join(got, "") != strings.Join(events, "") {
			t.Fatalf("got %q; want %q", got, events)
		}
	})
}

// The relay frames each chunk it writes in its own buffer, over the bytes
// around the events it sends: events that arrive cut anywhere, with part of
// the next one behind them, must still reach the client as they were sent.
func TestStreamEventsCutAcrossReads(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		pieces := []string{
			"data: {\"a\":1}\n\ndata: {\"b\"",
			":2}\n\ndata: {\"c\":3}\n\nda",
			"ta: [DO",
			"NE]\n\n",
		}
		next := make(chan struct{})
		h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for i, p := range pieces {
					if i > 0 {
						<-next
					}
					_, _ = w.WriteString(p)
					_ = w.Flush()
				}
			})
		})
		h.start(defaultConfig())
		s := h.openStream("/generate", `{"text": "a", "stream": true}`)
		// The events each piece completes.
		wants := [][]string{
			{"data: {\"a\":1}\n\n"},
			{"data: {\"b\":2}\n\n", "data: {\"c\":3}\n\n"},
			nil,
			{"data: [DONE]\n\n"},
		}
		for i, want := range wants {
			for _, ev := range want {
				if got := s.next(); got != ev {
					t.Fatalf("got %q; want %q", got, ev)
				}
			}
			if i < len(wants)-1 {
				s.none()
				next <- struct{}{}
			}
		}
		if rest := s.rest(); len(rest) != 0 {
			t.Fatalf("got %q after [DONE]", rest)
		}
	})
}

// sseHeaders begins the answer of a decode that frames its event stream by
// hand.
const sseHeaders = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// rawBackend serves addr by hand: answer writes the raw response to each
// request, and is told the number of the connection it came on.
func (h *harness) rawBackend(addr string, answer func(conn int, c net.Conn)) {
	h.t.Helper()
	ln, err := h.nw.Listen(addr)
	if err != nil {
		h.t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	h.t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for id := 0; ; id++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReader(c)
				var req fasthttp.Request
				for req.Read(br) == nil {
					answer(id, c)
				}
			})
		}
	})
}

// A stream read to its end leaves its decode connection to the next
// request; one whose decode sent bytes past the body's end does not.
func TestStreamConnectionIsReused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string // sent right after the body's end
		reuse bool
	}{
		{name: "clean", reuse: true},
		{name: "bytes after the end", extra: "HTTP/1.1 200 OK\r\n", reuse: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
				// The decode numbers each request with its connection.
				conns := make(chan int, 2)
				h.rawBackend("decode-0:30010", func(conn int, c net.Conn) {
					conns <- conn
					_, _ = io.WriteString(c, sseHeaders+"14\r\ndata: {\"text\":\"a\"}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"+tc.extra)
				})
				srv := h.start(defaultConfig())
				for range 2 {
					s := h.openStream("/generate", `{"text": "a", "stream": true}`)
					if got := append([]string{s.next()}, s.rest()...); len(got) != 2 || got[1] != "data: [DONE]\n\n" {
						t.Fatalf("got %q", got)
					}
					waitIdle(t, srv)
				}
				first, second := <-conns, <-conns
				if (first == second) != tc.reuse {
					t.Fatalf("decode connections %d and %d; want reused %v", first, second, tc.reuse)
				}
			})
		})
	}
}

// writeLog records every write made to the connections its listener
// accepts.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) listener(ln net.Listener) net.Listener { return loggingListener{ln, l} }

func (l *writeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes...)
}

type loggingListener struct {
	net.Listener
	log *writeLog
}

func (ln loggingListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return loggingConn{c, ln.log}, nil
}

type loggingConn struct {
	net.Conn
	log *writeLog
}

func (c loggingConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, string(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// gate waits for next, or for over to close.
func gate(next, over <-chan struct{}) {
	select {
	case <-next:
	case <-over:
	}
}

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// lastChunk ends a chunked body that has no trailers.
const lastChunk = "0\r\n\r\n"

// When the decode sends its last events and its body's end together, the
// relay sends them on together, in one write, and fasthttp's own end of
// the body is dropped: a client sees one end, and its connection then
// carries the next response as it should, even pipelined behind the
// stream (fasthttp then writes the end together with that response).
func TestStreamEndGoesWithTheLastEvents(t *testing.T) {
	const (
		first = "data: {\"text\":\"a\"}\n\n"
		last  = "data: {\"text\":\"ab\"}\n\n"
		done  = "data: [DONE]\n\n"
	)
	for _, tc := range []struct {
		name string
		// apart: the decode sends its body's end on its own, after the
		// last events; the relay has passed them on by then.
		apart bool
	}{
		{name: "together"},
		{name: "apart", apart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				log := &writeLog{}
				h.wrapListener = log.listener
				h.backend("prefill-0:30000", sseBackend("data: {}\n\n", done))
				next, over := make(chan struct{}), make(chan struct{})
				h.rawBackend("decode-0:30010", func(_ int, c net.Conn) {
					_, _ = io.WriteString(c, sseHeaders+chunk(first))
					gate(next, over)
					if tc.apart {
						_, _ = io.WriteString(c, chunk(last)+chunk(done))
						gate(next, over)
						_, _ = io.WriteString(c, lastChunk)
					} else {
						_, _ = io.WriteString(c, chunk(last)+chunk(done)+lastChunk)
					}
				})
				h.start(defaultConfig())
				t.Cleanup(func() { close(over) }) // before the decode's, which waits for its answers
				conn, err := h.nw.Dial("pdlb:8000")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = conn.Close() })
				const body = `{"text": "a", "stream": true}`
				sendRequest(t, conn, "/generate", body)
				sendRequest(t, conn, "/generate", body)
				// proceed lets the decode go on, unless it is stuck.
				proceed := func(next chan<- struct{}) {
					select {
					case next <- struct{}{}:
					case <-time.After(10 * time.Second):
						t.Fatal("the decode is not waiting to go on")
					}
				}
				br := bufio.NewReader(conn)
				for i := range 2 {
					s := readStream(t, conn, br)
					if got := s.next(); got != first {
						t.Fatalf("stream %d: got %q first; want %q", i, got, first)
					}
					proceed(next)
					if tc.apart {
						for _, want := range []string{last, done} {
							if got := s.next(); got != want {
								t.Fatalf("stream %d: got %q; want %q", i, got, want)
							}
						}
						proceed(next)
					}
					if got := s.rest(); !tc.apart && (len(got) != 2 || got[0] != last || got[1] != done) || tc.apart && len(got) != 0 {
						t.Fatalf("stream %d: got %q after the first event", i, got)
					}
				}
				writes := log.all()
				together := 0
				for _, w := range writes {
					if strings.HasSuffix(w, chunk(last+done)+lastChunk) {
						together++
					}
				}
				if want := map[bool]int{false: 2, true: 0}[tc.apart]; together != want {
					t.Fatalf("%d writes carry the last events and the body's end; want %d. Writes: %q", together, want, writes)
				}
			})
		})
	}
}

func TestStreamThatEndsEarlyGetsAnErrorEvent(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
		h.backend("decode-0:30010", sseBackend("data: {\"text\":\"a\"}\n\n", "data: {\"text\":\"ab\"}\n\n"))
		srv := h.start(defaultConfig())
		s := h.openStream("/generate", `{"text": "a", "stream": true}`)
		got := append([]string{s.next()}, s.rest()...)
		if len(got) != 4 || got[1] != "data: {\"text\":\"ab\"}\n\n" || got[3] != "data: [DONE]\n\n" {
			t.Fatalf("got %q; want the two events, an error event and [DONE]", got)
		}
		if msg := gjson.Get(strings.TrimPrefix(got[2], "data: "), "error.message").String(); !strings.Contains(msg, "decode backend decode-0:30010") {
			t.Fatalf("got error event %q; want it to name the decode", got[2])
		}
		waitIdle(t, srv)
	})
}

// However the decode's stream ends, the client gets whole events: a piece
// of one cut off is dropped before the error event (a connection cut, or a
// body that ended with data that does not parse), a last one without its
// blank line gets one, and a stream that sent [DONE] is complete even if
// its connection broke before the body's end.
func TestStreamEndings(t *testing.T) {
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	a := "data: {\"a\":1}\n\n"
	for _, tc := range []struct {
		name   string
		answer string // after the headers
		close  bool   // the decode closes its connection after answer
		want   []string
		broken string // the error event's message, "" if none
	}{
		{"cut in an event", chunk(a) + chunk(`data: {"b":2,"long":`), true,
			[]string{a}, "closed the connection in the middle of the stream"},
		{"cut after a line", chunk(a) + chunk("data: {\"b\":2}\n"), true,
			[]string{a}, "in the middle of the stream"},
		{"[DONE] without the body's end", chunk(a) + chunk("data: [DONE]\n\n"), true,
			[]string{a, "data: [DONE]\n\n"}, ""},
		{"[DONE] without its blank line", chunk(a) + chunk("data: [DONE]") + lastChunk, false,
			[]string{a, "data: [DONE]\n\n"}, ""},
		{"an event without its blank line, then the end", chunk(a) + chunk(`data: {"b":2}`) + lastChunk, false,
			[]string{a, "data: {\"b\":2}\n\n"}, "ended the stream early"},
		{"a piece of an event, then the end", chunk(a) + chunk(`data: {"b":2,"long":`) + lastChunk, false,
			[]string{a}, "ended the stream early"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
				h.rawBackend("decode-0:30010", func(_ int, c net.Conn) {
					_, _ = io.WriteString(c, sseHeaders+tc.answer)
					if tc.close {
						_ = c.Close()
					}
				})
				srv := h.start(defaultConfig())
				s := h.openStream("/generate", `{"text": "a", "stream": true}`)
				got := append([]string{s.next()}, s.rest()...)
				want := tc.want
				if tc.broken != "" {
					if len(got) != len(want)+2 {
						t.Fatalf("got %q; want %q, an error event and [DONE]", got, want)
					}
					if msg := gjson.Get(strings.TrimPrefix(got[len(want)], "data: "), "error.message").String(); !strings.Contains(msg, tc.broken) {
						t.Fatalf("got error event %q; want it to say %q", got[len(want)], tc.broken)
					}
					want = append(want, got[len(want)], "data: [DONE]\n\n")
				}
				if !slices.Equal(got, want) {
					t.Fatalf("got %q; want %q", got, want)
				}
				waitIdle(t, srv)
				if broken := srv.errorsByReason[reasonStreamBroken].Get(); (broken == 1) != (tc.broken != "") {
					t.Fatalf("got %d broken streams counted", broken)
				}
			})
		})
	}
}

func TestStreamLogprobsAreMerged(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		s := h.openStream("/generate", `{"input_ids": [5, 6, 7, 8], "return_logprob": true, "stream": true, "sampling_params": {"max_new_tokens": 2}}`)
		events := append([]string{s.next()}, s.rest()...)
		if len(events) != 3 {
			t.Fatalf("got %d events; want 2 and [DONE]: %q", len(events), events)
		}
		want := `[[null,5,null],[-0.2,6,null],[-0.3,7,null],[-0.4,8,null],[-0.4,8,null]]`
		for _, ev := range events[:2] {
			if got := gjson.Get(strings.TrimPrefix(ev, "data: "), "meta_info.input_token_logprobs").Raw; got != want {
				t.Fatalf("got input_token_logprobs %s; want %s", got, want)
			}
		}
	})
}

// In a /generate batch stream, each output's events get its item's prefill
// logprobs, found by the events' "index" (mini_lb gives every output the
// first one's). With n samples an item has n outputs, indexed item×n+j.
func TestStreamBatchLogprobsAreMergedPerItem(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		item := []string{"[5,6,7,8,8]", "[9,10,10]"}
		for _, n := range []int{1, 2} {
			s := h.openStream("/generate", `{"input_ids": [[5, 6, 7, 8], [9, 10]], "return_logprob": true, "stream": true, "sampling_params": {"max_new_tokens": 2, "n": `+strconv.Itoa(n)+`}}`)
			events := append([]string{s.next()}, s.rest()...)
			seen := map[int64]int{}
			for _, ev := range events {
				data := strings.TrimSpace(strings.TrimPrefix(ev, "data: "))
				if data == "[DONE]" {
					continue
				}
				i := gjson.Get(data, "index").Int()
				if want := item[i/int64(n)]; gjson.Get(data, "meta_info.input_token_logprobs.#.1").Raw != want {
					t.Fatalf("n=%d, output %d: got %s; want the logprobs of tokens %s", n, i, data, want)
				}
				seen[i]++
			}
			if len(seen) != 2*n {
				t.Fatalf("n=%d: got %v events by output; want %d outputs: %q", n, seen, 2*n, events)
			}
			for i, c := range seen {
				if c != 2 {
					t.Fatalf("n=%d: got %d events for output %d; want 2: %q", n, c, i, events)
				}
			}
		}
	})
}

// A client that goes away mid-stream cancels both legs.
func TestClientGoneCancelsTheStream(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{}, 8)
		gate <- struct{}{}
		h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		srv := h.start(defaultConfig())
		s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 5}}`)
		s.next()
		_ = s.conn.Close()
		for range 4 {
			gate <- struct{}{}
		}
		waitIdle(t, srv)
	})
}

// Shutdown lets a stream in flight finish before it returns.
func TestShutdownDrainsStreams(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{}, 8)
	gate <- struct{}{}
	h.pair(fake.Config{}, fake.Config{TokenGate: gate})
	srv := h.start(defaultConfig())
	s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 3}}`)
	s.next()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a stream in flight", err)
	default:
	}
	gate <- struct{}{}
	gate <- struct{}{}
	if rest := s.rest(); len(rest) != 3 || rest[2] != "data: [DONE]\n\n" {
		t.Fatalf("got %q; want the stream to complete", rest)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %s", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Shutdown did not return after the stream ended")
	}
}

// Clients too slow for the client timeouts are let go: one that sends its
// request too slowly gets a 408; one that stops reading a stream has its
// stream, and both legs, ended.
func TestSlowClientsAreLetGo(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	h := newHarness(t)
	generating := make(chan struct{}, 1)
	h.pair(fake.Config{}, fake.Config{OnRequest: func(path string, _ []byte) {
		if path == "/generate" {
			select {
			case generating <- struct{}{}:
			default:
			}
		}
	}})
	cfg := defaultConfig()
	cfg.ClientReadTimeout = 200 * time.Millisecond
	cfg.ClientWriteTimeout = 200 * time.Millisecond
	srv := h.start(cfg)

	t.Run("sends slowly", func(t *testing.T) {
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		// The body is announced but never all sent.
		if _, err := conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: 100\r\n\r\n{\"text\":")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("cannot read the answer: %v", err)
		}
		if resp.StatusCode() != fasthttp.StatusRequestTimeout || gjson.GetBytes(resp.Body(), "error.code").Int() != 408 {
			t.Fatalf("got %d %s; want a 408 JSON error", resp.StatusCode(), resp.Body())
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("the 408 took %s", took)
		}
		if got := h.metric(`pdlb_request_errors_total{reason="client_timeout"}`); got != "1" {
			t.Fatalf("got %q client_timeout errors; want 1", got)
		}
	})

	t.Run("stops reading", func(t *testing.T) {
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 100000}}`
		req := fmt.Sprintf("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		// Nothing is read: pdlb's writes fill the connection, then stall
		// until the write timeout lets the client go.
		select {
		case <-generating:
		case <-time.After(2 * time.Second):
			t.Fatal("the stream never reached the decode")
		}
		waitIdleWithin(t, srv, 3*time.Second)
		if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "1" {
			t.Fatalf("got %q client_gone errors; want 1", got)
		}
	})
}

// Once the decode's stream is relayed, the decode needs nothing more of the
// prefill: its first event was tokens, so it has the KV cache, or an error,
// and it ends the stream itself. A prefill that fails after that (a worker
// that dies between its transfer and its answer) must not break the stream,
// nor add an error event of pdlb's. Before the decode's first event, a
// failing prefill cancels it at once (see TestFailedLegCancelsItsPeer).
func TestPrefillFailingOnceTheDecodeStreamsLeavesTheStream(t *testing.T) {
	for name, events := range map[string][2]string{
		"tokens": {"data: {\"text\":\"a\"}\n\n", "data: {\"text\":\"ab\"}\n\ndata: [DONE]\n\n"},
		"error":  {"data: {\"error\": {\"message\": \"the decode failed\", \"code\": 500}}\n\n", "data: [DONE]\n\n"},
	} {
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				failPrefill := make(chan struct{})
				h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
					<-failPrefill
					ctx.SetStatusCode(fasthttp.StatusInternalServerError)
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"error": {"message": "the prefill died after its transfer"}}`)
				})
				more := make(chan struct{})
				h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
						_, _ = w.WriteString(events[0])
						_ = w.Flush()
						<-more
						_, _ = w.WriteString(events[1])
						_ = w.Flush()
					})
				})
				cfg := defaultConfig()
				cfg.DisableRetries = true // a first event that is an error is relayed
				srv := h.start(cfg)
				s := h.openStream("/generate", `{"text": "a", "stream": true}`)
				if ev := s.next(); s.status != fasthttp.StatusOK || ev != events[0] {
					t.Fatalf("got %d and first event %q", s.status, ev)
				}
				close(failPrefill)
				// The prefill's failure is counted just before it would cancel
				// its peer; the decode's last events are held until then.
				prefill := srv.prefills.backends()[0]
				synctest.Wait()
				if prefill.errors.Get() == 0 {
					t.Fatal("pdlb did not see the prefill fail")
				}
				close(more)
				if rest := strings.Join(s.rest(), ""); rest != events[1] {
					t.Fatalf("after the prefill failed, the stream went on with %q; want the decode's last events %q", rest, events[1])
				}
				waitIdle(t, srv)
			})
		})
	}
}

// A stream's prefill that fails inside a 200 event stream, as SGLang
// streams some failures, is a failed prefill: the decode, which would wait
// for a KV cache that never comes, is cancelled at once and the request
// tried again; out of retries, the client gets the prefill's failure.
func TestPrefillStreamingAFailure(t *testing.T) {
	for name, failure := range map[string]string{
		"abort": `data: {"text":"","meta_info":{"finish_reason":{"type":"abort","message":"boom","status_code":500}}}` + "\n\n",
		"error": `data: {"error":{"message":"boom","type":"InternalServerError","code":500}}` + "\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				var prefills atomic.Int32
				prefill := sseBackend(failure, "data: [DONE]\n\n")
				h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
					prefills.Add(1)
					prefill(ctx)
				})
				release := make(chan struct{})
				h.backend("decode-0:30010", stallingDecode(release)) // waits for the KV cache
				t.Cleanup(func() { close(release) })
				srv := h.start(defaultConfig())
				s := h.openStream("/generate", `{"text": "a", "stream": true}`)
				got := append([]string{s.next()}, s.rest()...)
				if s.status != fasthttp.StatusOK || len(got) != 2 || got[0] != failure {
					t.Fatalf("got %d %q; want the prefill's failure event and [DONE]", s.status, got)
				}
				if n := prefills.Load(); n != 3 {
					t.Fatalf("the prefill got %d attempts; want 3, the retries included", n)
				}
				waitIdle(t, srv)
			})
		})
	}
}

// A prefill that answers 200 but ended its request without handing the KV
// cache over has the decode cancelled at once: the decode would wait for
// the cache until its own timeout. An error event or an abort with a 4xx
// is the request's own failure: the client gets the prefill's answer, not
// retried. An abort without a status (an /abort_request, a prefill shutting
// down) is the prefill's, tried again as a 5xx is; out of retries, the
// client gets it.
func TestPrefillEndedEarly(t *testing.T) {
	abort := `{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Aborted by AbortReq.","status_code":null}}}`
	for _, tc := range []struct {
		name, body string
		prefill    fasthttp.RequestHandler
		want       string
		attempts   int32
	}{
		{"abort", `{"text": "a"}`, jsonBackend(abort), abort, 3},
		{"400 abort", `{"text": "a"}`, jsonBackend(strings.Replace(abort, "null", "400", 1)), `"status_code":400`, 1},
		{"streamed error", `{"text": "a", "stream": true}`, sseBackend(`data: {"error":{"message":"bad"}}`+"\n\n", "data: [DONE]\n\n"), `data: {"error":{"message":"bad"}}`, 1},
		{"streamed 400 abort", `{"text": "a", "stream": true}`, sseBackend(`data: {"text":"","meta_info":{"finish_reason":{"type":"abort","message":"too long","status_code":400}}}`+"\n\n", "data: [DONE]\n\n"), `"too long"`, 1},
		{"OpenAI abort", `{"prompt": "a"}`, jsonBackend(`{"object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"abort"}]}`), `"finish_reason":"abort"`, 3},
		{"OpenAI streamed abort", `{"prompt": "a", "stream": true}`, sseBackend(`data: {"choices":[{"index":0,"text":"","finish_reason":"abort"}]}`+"\n\n", "data: [DONE]\n\n"), `"finish_reason":"abort"`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				var prefills atomic.Int32
				h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
					prefills.Add(1)
					tc.prefill(ctx)
				})
				release := make(chan struct{})
				decode := func(ctx *fasthttp.RequestCtx) { <-release } // waits for the KV cache
				if strings.Contains(tc.body, "stream") {
					decode = stallingDecode(release) // its headers sent, as SGLang's are
				}
				h.backend("decode-0:30010", decode)
				t.Cleanup(func() { close(release) })
				cfg := defaultConfig()
				cfg.RequestTimeout = 5 * time.Second // the failure: a 504 after it
				srv := h.start(cfg)
				path := "/generate"
				if strings.Contains(tc.body, "prompt") {
					path = "/v1/completions"
				}
				r := h.post(path, tc.body)
				if r.status != fasthttp.StatusOK || !strings.Contains(string(r.body), tc.want) {
					t.Fatalf("got %d %s; want the prefill's answer", r.status, r.body)
				}
				if n := prefills.Load(); n != tc.attempts {
					t.Fatalf("the prefill got %d attempts; want %d", n, tc.attempts)
				}
				waitIdle(t, srv)
			})
		})
	}
}

// A batch an item of which the prefill ended early gets an error naming the
// item, with the abort's 4xx or a 502: the prefill's answer holds one token
// of each other item, which the client must not take for the batch's.
func TestPrefillEndedABatchItemEarly(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		prefill fasthttp.RequestHandler
		status  int
	}{
		"non-stream": {`{"text": ["a", "b"]}`, jsonBackend(`[{"text":"x","meta_info":{"finish_reason":{"type":"length","length":1}}},` +
			`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Aborted by AbortReq.","status_code":null}}}]`), fasthttp.StatusBadGateway},
		"stream": {`{"text": ["a", "b"], "stream": true}`, sseBackend(`data: {"text":"x","index":0,"meta_info":{"finish_reason":{"type":"length","length":1}}}`+"\n\n",
			`data: {"text":"","index":1,"meta_info":{"finish_reason":{"type":"abort","message":"Aborted by AbortReq.","status_code":400}}}`+"\n\n", "data: [DONE]\n\n"), fasthttp.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.backend("prefill-0:30000", tc.prefill)
				srv := startWithWaitingDecode(h)
				r := h.post("/generate", tc.body)
				if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != tc.status ||
					!strings.Contains(msg, "ended batch item 1 early (Aborted by AbortReq.); the batch was not decoded") {
					t.Fatalf("got %d %s; want %d naming item 1", r.status, r.body, tc.status)
				}
				waitIdle(t, srv)
			})
		})
	}
}

// startWithWaitingDecode gives h a decode that waits until the test ends,
// as for a KV cache that never comes, and starts pdlb in front with a 5 s
// request timeout: a request its prefill does not end at once fails then.
func startWithWaitingDecode(h *harness) *Server {
	release := make(chan struct{})
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) { <-release })
	h.t.Cleanup(func() { close(release) })
	cfg := defaultConfig()
	cfg.RequestTimeout = 5 * time.Second
	return h.start(cfg)
}

// jsonBackend answers every request with body as JSON.
func jsonBackend(body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

// A decode that answers 200 and ends its event stream before any event did
// answer: the 502 says so, not that it closed the connection before
// answering.
func TestDecodeEndsItsStreamBeforeAnyEvent(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", sseBackend(`data: {"text":"a"}`+"\n\n", "data: [DONE]\n\n"))
		h.backend("decode-0:30010", stallingDecode(nil))
		cfg := defaultConfig()
		cfg.DisableRetries = true
		h.start(cfg)
		r := h.post("/generate", `{"text": "a", "stream": true}`)
		if want := "answered 200 and ended its event stream before the first event"; r.status != fasthttp.StatusBadGateway || !strings.Contains(string(r.body), want) {
			t.Fatalf("got %d %s; want a 502 saying %q", r.status, r.body, want)
		}
	})
}

// "stream": "false" is a stream to mini_lb's Python truthiness, which pdlb
// follows, but no stream to SGLang's pydantic models: the decode answers
// JSON, which the client gets as it is.
func TestStreamFalseAsAString(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		r := h.post("/generate", `{"text": "a", "stream": "false"}`)
		if r.status != fasthttp.StatusOK || !gjson.ValidBytes(r.body) || !gjson.GetBytes(r.body, "text").Exists() {
			t.Fatalf("got %d %s; want the decode's JSON answer", r.status, r.body)
		}
	})
}

// A non-stream prefill answer that an abort with a 5xx status ended (how
// SGLang answered some failures of its own before it raised them) is a
// failed prefill, tried again, as a streamed one is.
func TestPrefillAbortWith5xxIsRetried(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		var prefills atomic.Int32
		abort := jsonBackend(`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"overloaded","status_code":503}}}`)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			prefills.Add(1)
			abort(ctx)
		})
		srv := startWithWaitingDecode(h)
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusOK || !strings.Contains(string(r.body), "overloaded") {
			t.Fatalf("got %d %s; want the prefill's answer once out of retries", r.status, r.body)
		}
		if n := prefills.Load(); n != 3 {
			t.Fatalf("the prefill got %d attempts; want 3, the retries included", n)
		}
		// The worker's failure passed on is counted as one.
		if got := h.metric(`pdlb_request_errors_total{reason="backend_failed"}`); got != "1" {
			t.Fatalf("got %q backend_failed; want 1", got)
		}
		waitIdle(t, srv)
	})
}

// A stream request that its decode answers with a 5xx instead of a stream
// gets that answer, counted as the worker's failure passed on, as it is for
// a non-stream request: it was not counted.
func TestDecode5xxToAStreamIsCounted(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", jsonBackend(`{}`))
		var served atomic.Int32
		h.backend("decode-0:30010", failing(&served, fasthttp.StatusInternalServerError, `{"error": "boom"}`))
		cfg := defaultConfig()
		cfg.DisableRetries = true
		srv := h.start(cfg)
		r := h.post("/generate", `{"text": "a", "stream": true}`)
		if r.status != fasthttp.StatusInternalServerError || !strings.Contains(string(r.body), "boom") {
			t.Fatalf("got %d %s; want the decode's 500", r.status, r.body)
		}
		if got := h.metric(`pdlb_request_errors_total{reason="backend_failed"}`); got != "1" {
			t.Fatalf("got %q backend_failed; want 1", got)
		}
		waitIdle(t, srv)
	})
}

// A stream whose first event is the decode's failure is relayed as it is
// once no retry is left, and counted and logged as a worker's failure
// passed on, as a 5xx answer is.
func TestDecodeFailureEventPassedOnIsCounted(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.backend("prefill-0:30000", sseBackend("data: {}\n\n", "data: [DONE]\n\n"))
		failure := `data: {"error": {"message": "boom", "code": 500}}` + "\n\n"
		h.backend("decode-0:30010", sseBackend(failure, "data: [DONE]\n\n"))
		cfg := defaultConfig()
		cfg.DisableRetries = true
		srv := h.start(cfg)
		s := h.openStream("/generate", `{"text": "a", "stream": true}`)
		if got := append([]string{s.next()}, s.rest()...); len(got) != 2 || got[0] != failure {
			t.Fatalf("got %q; want the decode's failure event and [DONE]", got)
		}
		waitIdle(t, srv)
		if got := h.metric(`pdlb_request_errors_total{reason="backend_failed"}`); got != "1" {
			t.Fatalf("got %q backend_failed; want 1", got)
		}
	})
}

// A stream request whose prefill fails while the decode's error answer is
// being read gets the prefill's failure, as a non-stream request does: the
// prefill's failure closed the decode's connection under that read, and
// "use of closed network connection" was no answer to give.
func TestStreamBothLegsFailing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		headersSent := make(chan struct{}, 1)
		h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
			<-headersSent
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"error": "prefill boom"}`)
		})
		h.rawBackend("decode-0:30010", func(_ int, c net.Conn) {
			// The answer's headers and the start of its body; the rest never
			// comes, so the read is still going when the prefill fails.
			_, _ = io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"error\": ")
			headersSent <- struct{}{}
		})
		cfg := defaultConfig()
		cfg.DisableRetries = true
		srv := h.start(cfg)
		r := h.post("/generate", `{"text": "a", "stream": true}`)
		if r.status != fasthttp.StatusInternalServerError || !strings.Contains(string(r.body), "prefill boom") {
			t.Fatalf("got %d %s; want the prefill's 500", r.status, r.body)
		}
		waitIdle(t, srv)
	})
}
