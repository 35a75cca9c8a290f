package lb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"pdlb/bench/fake"
)

// expired is a context whose time is up: Shutdown given it cuts at once.
func expired() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// shutdownCut shuts srv down with no grace and checks that it reports one
// request cut.
func shutdownCut(t *testing.T, srv *Server) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(expired()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown hangs")
	}
	var cut *CutError
	if !errors.As(err, &cut) || cut.Requests != 1 {
		t.Fatalf("Shutdown: got %v; want a CutError of 1 request", err)
	}
}

// checkCutAccounted checks that one request of route was counted and
// logged as cut by the shutdown, with status 503.
func checkCutAccounted(t *testing.T, srv *Server, logs *syncBuffer, route string) {
	t.Helper()
	var m bytes.Buffer
	srv.ms.WritePrometheus(&m)
	for _, want := range []string{
		`pdlb_request_errors_total{reason="shutdown"} 1`,
		`pdlb_requests_total{route="` + route + `",code="503"} 1`,
	} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, m.String())
		}
	}
	var access, cutLine bool
	for line := range strings.Lines(logs.String()) {
		switch gjson.Get(line, "message").String() {
		case "request":
			access = gjson.Get(line, "route").String() == route && gjson.Get(line, "status").Int() == 503
		case "shutdown grace period over: cutting the requests in flight":
			cutLine = gjson.Get(line, "requests").Int() == 1
		}
	}
	if !access || !cutLine {
		t.Errorf("got log %s; want an access line with status 503 and the count of requests cut", logs.String())
	}
}

// When the grace period ends, a stream in flight ends as a broken stream
// does: an SSE error event, [DONE] and the chunked body's end; and it is
// counted and logged. It used to be cut mid-chunk, unaccounted.
func TestShutdownCutsStreams(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{}, 1)
	gate <- struct{}{}
	h.pair(fake.Config{}, fake.Config{TokenGate: gate})
	var logs syncBuffer
	cfg := defaultConfig()
	cfg.AccessLog = true
	srv := h.startLogged(cfg, zerolog.New(&logs))
	conn, err := h.nw.Dial("pdlb:8000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	sendRequest(t, conn, "/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 3}}`)
	br := bufio.NewReader(conn)
	var got []byte
	for !bytes.Contains(got, []byte("data:")) { // the first token's event
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("got %q, then %v; want the first event", got, err)
		}
		got = append(got, b)
	}
	shutdownCut(t, srv)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	errEvent := "data: " + string(appendErrorJSON(nil, fasthttp.StatusServiceUnavailable, errShutdown.Error())) + "\n\n"
	if !bytes.HasSuffix(got, []byte(errEvent+"data: [DONE]\n\n\r\n0\r\n\r\n")) {
		t.Fatalf("got %q; want the stream to end with the shutdown's error event, [DONE] and the body's end", got)
	}
	checkCutAccounted(t, srv, &logs, "/generate")
}

// When the grace period ends, a non-stream request that has not been
// answered gets a 503 JSON error rather than a closed connection, and is
// counted and logged. Its rid is no matter: cutting a request with one
// once deadlocked the shutdown (the cut held the flight lock, and the
// abort by rid took it again).
func TestShutdownAnswersRequestsInFlight(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		arrived := make(chan struct{}, 1)
		h.pair(fake.Config{}, fake.Config{TokenGate: make(chan struct{}), OnRequest: func(path string, _ []byte) {
			if path == "/generate" {
				arrived <- struct{}{}
			}
		}})
		var logs syncBuffer
		cfg := defaultConfig()
		cfg.AccessLog = true
		srv := h.startLogged(cfg, zerolog.New(&logs))
		type answer struct {
			reply
			err error
		}
		answered := make(chan answer, 1)
		go func() {
			r, err := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a", "rid": "request-cut-at-shutdown"}`)
			answered <- answer{r, err}
		}()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not reach the decode")
		}
		shutdownCut(t, srv)
		a := <-answered
		if a.err != nil {
			t.Fatal(a.err)
		}
		if retryAfter := a.header.Peek("Retry-After"); a.status != fasthttp.StatusServiceUnavailable || retryAfter == nil ||
			gjson.GetBytes(a.body, "error.message").String() != errShutdown.Error() ||
			gjson.GetBytes(a.body, "error.type").String() != "service_unavailable" {
			t.Fatalf("got %d %s (Retry-After %q); want a 503 JSON error saying pdlb is shutting down", a.status, a.body, retryAfter)
		}
		checkCutAccounted(t, srv, &logs, "/generate")
	})
}

// A request still waiting for an admission slot when the grace period ends
// is cut and answered too, and counted with the one holding the slot.
func TestShutdownCutsQueuedRequests(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		inDecode, release, cfg := oneAtATime(h)
		t.Cleanup(func() { close(release) }) // at the end: pdlb cuts the call before
		cfg.QueueTimeout = 20 * time.Second
		srv := h.start(cfg)
		answers := make(chan reply, 2)
		go func() { answers <- h.post("/generate", `{"text": "holds the slot"}`) }()
		<-inDecode
		go func() { answers <- h.post("/generate", `{"text": "queued"}`) }()
		waitFor(t, "the second request to queue", func() bool { return srv.admission.queued.Load() == 1 })
		var cut *CutError
		if err := srv.Shutdown(expired()); !errors.As(err, &cut) || cut.Requests != 2 {
			t.Fatalf("Shutdown: got %v; want a CutError of 2 requests", err)
		}
		for range 2 {
			if r := <-answers; r.status != fasthttp.StatusServiceUnavailable || gjson.GetBytes(r.body, "error.message").String() != errShutdown.Error() {
				t.Fatalf("got %d %s; want the shutdown's 503", r.status, r.body)
			}
		}
	})
}

// The admin listener (metrics, pprof) serves through a drain, so that it
// can be watched, and closes once it is over.
func TestAdminListenerServesThroughTheDrain(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{}, 8)
		gate <- struct{}{}
		h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		srv := h.start(defaultConfig())
		ln, err := h.nw.Listen("admin:6060")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.ServeAdmin(ln, false) }()
		cl := &fasthttp.HostClient{Addr: "admin:6060", Dial: h.nw.Dial}
		defer cl.CloseIdleConnections()
		s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 2}}`)
		s.next()
		drained := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			drained <- srv.Shutdown(ctx)
		}()
		waitFor(t, "pdlb to stop taking clients", func() bool {
			c, err := h.nw.Dial("pdlb:8000")
			if err == nil {
				_ = c.Close()
			}
			return err != nil
		})
		if status, _, err := cl.Get(nil, "http://admin:6060/metrics"); err != nil || status != fasthttp.StatusOK {
			t.Fatalf("during the drain /metrics got %d, %v; want 200", status, err)
		}
		select {
		case err := <-drained:
			t.Fatalf("the drain ended (%v) with a stream in flight", err)
		default:
		}
		gate <- struct{}{}
		s.rest()
		if err := <-drained; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		cl.CloseIdleConnections()
		if _, _, err := cl.Get(nil, "http://admin:6060/metrics"); err == nil {
			t.Fatal("the admin listener still serves after the shutdown")
		}
	})
}

// A client that reads nothing of a large answer holds it past the
// shutdown's grace: its connection is closed then, and the request is
// accounted as cut off (499), not lost from the metrics and the log.
func TestShutdownAccountsAnswersClientsDoNotRead(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	h := newHarness(t)
	answer := `{"text": "` + strings.Repeat("x", 16<<20) + `"}`
	h.backend("prefill-0:30000", jsonBackend(`{"text": ""}`))
	h.backend("decode-0:30010", jsonBackend(answer))
	cfg := defaultConfig()
	cfg.ClientWriteTimeout = time.Minute // the shutdown, not the write timeout, ends it
	srv := h.start(cfg)
	conn := dialSmallWindow(t, h.serveTCP(srv))
	sendRequest(t, conn, "/generate", `{"text": "a"}`)
	// The answer is on its way once its first bytes come; the client reads
	// no more of it.
	start := make([]byte, len("HTTP/1.1 200"))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, start); err != nil || string(start) != "HTTP/1.1 200" {
		t.Fatalf("got %q, %v; want the answer's start", start, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = srv.Shutdown(ctx)
	if n := srv.live.Load(); n != 0 {
		t.Fatalf("%d exchanges live after Shutdown", n)
	}
	if got := srv.routes["/generate"].byStatus[statusClientGone].Load(); got == nil || got.Get() != 1 {
		t.Fatalf("the request was not counted as cut off (499)")
	}
}

// A Serve or ServeAdmin that begins while or after Shutdown runs returns
// instead of accepting for ever: fasthttp's Shutdown closes only the
// listeners its Serve has registered (a SIGTERM as pdlb starts).
func TestServeAfterShutdownReturns(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		srv, err := New(defaultConfig(), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		for name, serve := range map[string]func(ln net.Listener) error{
			"Serve":      srv.Serve,
			"ServeAdmin": func(ln net.Listener) error { return srv.ServeAdmin(ln, false) },
		} {
			ln := fasthttputil.NewInmemoryListener()
			served := make(chan error, 1)
			go func() { served <- serve(ln) }()
			synctest.Wait()
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("%s after Shutdown: %s; want nil", name, err)
				}
			default:
				t.Errorf("%s after Shutdown still accepts", name)
				_ = ln.Close()
				<-served
			}
		}
	})
}
