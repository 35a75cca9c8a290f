package lb

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// acceptedPair returns both ends of a loopback TCP connection, the server's
// wrapped as pdlb's listener wraps it.
func acceptedPair(t *testing.T) (client net.Conn, server *clientConn) {
	t.Helper()
	client, c, err := loopbackPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	server = newClientConn(c)
	if server.raw == nil {
		t.Fatal("a TCP connection was accepted without its raw connection: reads would not read ahead")
	}
	return client, server
}

func TestShortReadReadsTheWholeRequestAhead(t *testing.T) {
	client, c := acceptedPair(t)
	const request = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	first := make([]byte, 1)
	if n, err := c.Read(first); n != 1 || err != nil || first[0] != 'P' {
		t.Fatalf("first read: %d %q %v, want the request's first byte", n, first[:n], err)
	}
	if len(c.ahead) != len(request)-1 {
		t.Fatalf("after a one-byte read %d bytes are held ahead, want the other %d of the request", len(c.ahead), len(request)-1)
	}
	// The rest comes from the buffer, however it is asked for.
	got := string(first)
	for len(got) < len(request) {
		p := make([]byte, 7)
		n, err := c.Read(p)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got += string(p[:n])
	}
	if got != request {
		t.Fatalf("read %q, want %q", got, request)
	}
	if c.ahead != nil || c.aheadBuf != nil {
		t.Fatal("the buffer is still held once everything read ahead was returned")
	}
}

func TestLongReadsGoStraightToTheSocket(t *testing.T) {
	client, c := acceptedPair(t)
	if _, err := client.Write([]byte("0123456789abcdefghij")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p := make([]byte, 64)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) == "" {
		t.Fatalf("read %q, %v", p[:n], err)
	}
	if c.aheadBuf != nil {
		t.Fatal("a read with room for the request took a read-ahead buffer")
	}
}

// A keep-alive request read through the read-ahead path allocates
// nothing: the buffer is pooled and the poller's callback is bound once.
func TestReadAheadAllocatesNothing(t *testing.T) {
	client, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	const request = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	req, p := []byte(request), make([]byte, len(request))
	readOne := func() {
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		// fasthttp's way: the first byte alone, then the rest.
		if n, err := c.Read(p[:1]); n != 1 || err != nil {
			t.Fatalf("first byte: %d, %v", n, err)
		}
		for got := 1; got < len(request); {
			n, err := c.Read(p[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	readOne() // fills the pool
	if allocs := testing.AllocsPerRun(100, readOne); allocs != 0 && !raceEnabled {
		t.Fatalf("a request read ahead costs %v allocations, want 0", allocs)
	}
}

func TestReadAheadReportsEndAndDeadline(t *testing.T) {
	t.Run("client closes", func(t *testing.T) {
		client, c := acceptedPair(t)
		client.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("read on a closed connection: %d, %v; want 0, EOF", n, err)
		}
	})
	t.Run("deadline passes", func(t *testing.T) {
		_, c := acceptedPair(t)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past its deadline: %v, want a timeout", err)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past its deadline: %v, want it to wrap os.ErrDeadlineExceeded as a plain read's does", err)
		}
	})
	t.Run("data after a wait", func(t *testing.T) {
		client, c := acceptedPair(t)
		go func() {
			time.Sleep(20 * time.Millisecond)
			_, _ = client.Write([]byte("late"))
		}()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		p := make([]byte, 1)
		if n, err := c.Read(p); n != 1 || err != nil || p[0] != 'l' {
			t.Fatalf("read after a wait: %d %q %v", n, p[:n], err)
		}
	})
}

// deadlineCounter counts the read deadlines given to its connection.
type deadlineCounter struct {
	net.Conn
	moves int
}

func (d *deadlineCounter) SetReadDeadline(t time.Time) error {
	d.moves++
	return d.Conn.SetReadDeadline(t)
}

// fasthttp's deadlines reach the socket only when a read goes to it, and
// a deadline in the step the socket has already moves nothing.
func TestClientReadDeadlineMovesOncePerStep(t *testing.T) {
	client, c := acceptedPair(t)
	socket := &deadlineCounter{Conn: c.Conn}
	c.Conn = socket
	readOne := func(what string, wantMoves int) {
		t.Helper()
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Fatalf("%s: read %d, %v", what, n, err)
		}
		if socket.moves != wantMoves {
			t.Fatalf("%s: the socket's deadline moved %d times in all, want %d", what, socket.moves, wantMoves)
		}
	}
	// Early in a step, so that 10 ms later is still in it.
	first := wireDeadline(time.Now().Add(time.Minute)).Add(-deadlineStep + time.Millisecond)
	_ = c.SetReadDeadline(first)
	_ = c.SetReadDeadline(first.Add(time.Millisecond))
	if socket.moves != 0 {
		t.Fatal("SetReadDeadline moved the socket's deadline before any read")
	}
	readOne("first deadline", 1)
	if want := wireDeadline(first); !c.armed.Equal(want) {
		t.Fatalf("the socket has %v, want %v (the deadline rounded up)", c.armed, want)
	}
	_ = c.SetReadDeadline(first.Add(10 * time.Millisecond))
	readOne("a deadline in the same step", 1)
	_ = c.SetReadDeadline(first.Add(deadlineStep))
	readOne("a deadline in the next step", 2)
	_ = c.SetReadDeadline(time.Time{})
	readOne("no deadline", 3)
	if !c.armed.IsZero() {
		t.Fatalf("the socket keeps the deadline %v after it was cleared", c.armed)
	}
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("a read past its deadline: %v, want a timeout", err)
	}
}

// A watch interrupts its read with a deadline of its own; the connection's
// deadline holds again once the watch is over.
func TestUnwatchRestoresTheReadDeadline(t *testing.T) {
	_, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := c.armRead(); err != nil {
		t.Fatal(err)
	}
	c.watch(func() { t.Error("the client was taken for gone") })
	if c.done == nil {
		t.Fatal("the watch did not start")
	}
	c.unwatch()
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		if !isTimeout(err) {
			t.Fatalf("read after the watch: %v, want a timeout", err)
		}
	case <-time.After(2 * time.Second):
		c.Close() // ends the read
		t.Fatalf("a read after the watch outlived its deadline (at most %s away) by seconds", 50*time.Millisecond+deadlineStep)
	}
}

// The watcher's timer keeps running from one request to the next: a
// request armed while it runs for an earlier one is watched only once it
// has itself waited watchAfter, and then its client's leaving is seen.
func TestWatcherWaitsForTheRequestArmedLast(t *testing.T) {
	client, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	gone := make(chan time.Time, 1)
	var w watcher
	w.init(func() { gone <- time.Now() }, time.Now)

	w.arm(c, time.Now()) // a short request: its timer keeps running
	w.disarm()
	time.Sleep(watchAfter / 2)
	second := time.Now()
	w.arm(c, second)
	client.Close()
	select {
	case at := <-gone:
		if waited := at.Sub(second); waited < watchAfter {
			t.Fatalf("the watch started %s after the request, before watchAfter (%s)", waited, watchAfter)
		}
	case <-time.After(watchAfter + 3*time.Second):
		t.Fatal("the client's leaving was never seen")
	}
	w.disarm()
}

func TestWatchDoesNotStartWhileBytesAreReadAhead(t *testing.T) {
	client, c := acceptedPair(t)
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\nGET /next")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.watch(func() { t.Error("the client was taken for gone") })
	if c.done != nil {
		t.Fatal("a watch started though the client's next bytes are already read")
	}
}

// dialTCP connects to pdlb at addr for the rest of the test, with 20 s to
// do all it does, and returns a reader of its replies.
func dialTCP(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn, bufio.NewReader(conn)
}

// The harness's in-memory connections have no descriptor, so they never
// read ahead; this runs requests through pdlb on loopback TCP, cut and
// joined every way the read-ahead must handle.
func TestServerReadsRequestsOverTCP(t *testing.T) {
	h := newHarness(t)
	h.pair(fake.Config{}, fake.Config{})
	conn, replies := dialTCP(t, h.serveTCP(h.start(defaultConfig())))

	request := func(prompt string) string {
		body := `{"text": "` + prompt + `", "sampling_params": {"max_new_tokens": 3}}`
		return "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	expectAnswers := func(what string, n int) {
		t.Helper()
		for i := range n {
			resp, err := http.ReadResponse(replies, nil)
			if err != nil {
				t.Fatalf("%s, answer %d: %v", what, i+1, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || gjson.GetBytes(body, "text").String() == "" {
				t.Fatalf("%s, answer %d: %d %s %v", what, i+1, resp.StatusCode, body, err)
			}
		}
	}
	send := func(pieces ...string) {
		t.Helper()
		for i, p := range pieces {
			if i > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := conn.Write([]byte(p)); err != nil {
				t.Fatal(err)
			}
		}
	}

	send(request("one"))
	expectAnswers("a request", 1)
	send(request("two") + request("three"))
	expectAnswers("two requests in one write", 2)
	r := request("four")
	send(r[:1], r[1:30], r[30:])
	expectAnswers("a request in three writes", 1)
	send(request(strings.Repeat("long ", 4*aheadSize/5)))
	expectAnswers("a request larger than the read-ahead buffer", 1)
	send(request("five"))
	expectAnswers("a request after them", 1)
}

// dialSmallWindow connects to addr over TCP with a small receive buffer,
// so that a client that reads nothing soon fills the sockets between it
// and pdlb. The buffer is set before connecting so that the window is
// small from the start (set later, the sender waits for the window it
// first saw to open again, and stalls). The connection is closed when the
// test ends.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := dialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A client that stops reading a non-stream answer is let go after
// ClientWriteTimeout, as one that stops reading a stream is: pdlb's
// writes fill the sockets, then the write deadline ends the connection.
// The request is accounted once its answer is cut off, as a 499
// (client_gone), not as the 200 it was when the answer was ready.
func TestClientNotReadingAnAnswerIsLetGo(t *testing.T) {
	h := newHarness(t)
	// Larger than what the sockets between pdlb and the client can hold
	// (4 MiB of send buffer at most here, a few KiB of receive buffer).
	answer := `{"text": "` + strings.Repeat("x", 16<<20) + `"}`
	h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text": ""}`)
	})
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(answer)
	})
	cfg := defaultConfig()
	cfg.ClientWriteTimeout = 200 * time.Millisecond
	srv := h.start(cfg)
	addr := h.serveTCP(srv)
	conn := dialSmallWindow(t, addr)
	sendRequest(t, conn, "/generate", `{"text": "a"}`)
	// The client reads nothing until pdlb has let it go: pdlb's writes
	// fill the sockets and wait, its write deadline passes, and the
	// request is accounted as cut off.
	waitFor(t, "pdlb to let the client go", func() bool {
		return h.metric(`pdlb_requests_total{route="/generate",code="499"}`) == "1"
	})
	// Then what it reads is cut short. (Still writing, pdlb would send the
	// rest as the client reads.)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.Copy(io.Discard, conn)
	if got >= int64(len(answer)) || isTimeout(err) {
		t.Fatalf("the client read %d bytes of the %d-byte answer (%v): pdlb did not give up", got, len(answer), err)
	}
	waitIdle(t, srv)
	for name, want := range map[string]string{
		`pdlb_requests_total{route="/generate",code="499"}`: "1",
		`pdlb_requests_total{route="/generate",code="200"}`: "",
		`pdlb_request_errors_total{reason="client_gone"}`:   "1",
	} {
		if got := h.metric(name); got != want {
			t.Fatalf("got %s %q; want %q", name, got, want)
		}
	}
	// The same answer, read at once, is a 200.
	if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || string(r.body) != answer {
		t.Fatalf("got %d and %d bytes; want 200 and the %d-byte answer", r.status, len(r.body), len(answer))
	}
	waitIdle(t, srv)
	if got := h.metric(`pdlb_requests_total{route="/generate",code="200"}`); got != "1" {
		t.Fatalf("got %q requests counted 200; want 1", got)
	}
}

// An answer larger than the write buffer goes out in one writev: its first
// write, the full buffer, is held back until the second comes.
func TestLargeAnswerIsHeldForOneWrite(t *testing.T) {
	client, c := acceptedPair(t)
	full := []byte(strings.Repeat("h", clientWriteBufferSize))
	rest := []byte(strings.Repeat("r", 3000))
	expect := func(want string) {
		t.Helper()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(client, got); err != nil || string(got) != want {
			t.Fatalf("the client read %.40q... (%d bytes), %v; want %.40q... (%d bytes)", got, len(got), err, want, len(want))
		}
	}

	c.holdLargeAnswer()
	if n, err := c.Write(full); n != len(full) || err != nil {
		t.Fatalf("the held write returned %d, %v", n, err)
	}
	if c.held == nil {
		t.Fatal("the full buffer of a large answer was written at once")
	}
	if n, err := c.Write(rest); n != len(rest) || err != nil {
		t.Fatalf("the second write returned %d, %v", n, err)
	}
	if c.held != nil || c.holdNext {
		t.Fatal("the held write was not sent with the second")
	}
	expect(string(full) + string(rest))

	// Unasked, or with a first write that is not the full buffer (the
	// answer fit after all), nothing is held.
	if _, err := c.Write(full); err != nil || c.held != nil {
		t.Fatalf("an unannounced write was held (%v)", err)
	}
	expect(string(full))
	c.holdLargeAnswer()
	if _, err := c.Write(rest); err != nil || c.held != nil || c.holdNext {
		t.Fatalf("a write shorter than the buffer was held, or the hold stayed armed (%v)", err)
	}
	expect(string(rest))

	// A read sends what is held first: the client may wait for it.
	c.holdLargeAnswer()
	_, _ = c.Write(full)
	if _, err := client.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 64)); err != nil || c.held != nil {
		t.Fatalf("the read failed (%v) or left the write held", err)
	}
	expect(string(full))

	if n := testing.AllocsPerRun(100, func() {
		c.holdLargeAnswer()
		_, _ = c.Write(full)
		_, _ = c.Write(rest)
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadFull(client, make([]byte, len(full)+len(rest)))
	}); n > 1 && !raceEnabled { // the read buffer of the check
		t.Fatalf("a held answer cost %.1f allocations; want none", n-1)
	}
}

// Answers of every size around the write buffer's, in turn, pipelined and
// on a closing connection, arrive whole: a held write is always sent.
func TestAnswersAroundTheWriteBufferSizeOverTCP(t *testing.T) {
	h := newHarness(t)
	h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text": ""}`)
	})
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(answerOfSize(int(gjson.GetBytes(ctx.PostBody(), "size").Int())))
	})
	conn, replies := dialTCP(t, h.serveTCP(h.start(defaultConfig())))
	request := func(size int, headers string) string {
		body := `{"text": "a", "size": ` + strconv.Itoa(size) + `}`
		return "POST /generate HTTP/1.1\r\nHost: pdlb\r\n" + headers + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	expect := func(sizes ...int) {
		t.Helper()
		for _, size := range sizes {
			resp, err := http.ReadResponse(replies, nil)
			if err != nil {
				t.Fatalf("the answer of %d bytes: %v", size, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != answerOfSize(size) {
				t.Fatalf("the answer of %d bytes: %d, %d bytes, %v", size, resp.StatusCode, len(body), err)
			}
		}
	}
	send := func(requests ...string) {
		t.Helper()
		if _, err := conn.Write([]byte(strings.Join(requests, ""))); err != nil {
			t.Fatal(err)
		}
	}

	// The header is a few hundred bytes: these cover an answer that just
	// fits the buffer with it, one that fills it exactly, and one a byte
	// over, whatever the header's length.
	for size := clientWriteBufferSize - 400; size <= clientWriteBufferSize+2; size++ {
		send(request(size, ""))
		expect(size)
	}
	for _, size := range []int{2 * clientWriteBufferSize, 2*clientWriteBufferSize + 1, 64 << 10, 1 << 20} {
		send(request(size, ""))
		expect(size)
	}
	send(request(3000, ""), request(100, ""), request(clientWriteBufferSize, ""), request(5000, ""))
	expect(3000, 100, clientWriteBufferSize, 5000)
	send(request(3000, "Connection: close\r\n"))
	expect(3000)
	if n, err := replies.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the closing answer the client read %d bytes, %v; want the end", n, err)
	}
}

// answerOfSize is a JSON answer of exactly size bytes (at least 12).
func answerOfSize(size int) string {
	return `{"text": "` + strings.Repeat("x", size-len(`{"text": ""}`)) + `"}`
}

// failingListener fails its first accepts with err, then accepts from the
// listener it wraps.
type failingListener struct {
	net.Listener
	err   error
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// Out of file descriptors (a flood of clients), pdlb waits and accepts
// again, rather than stop serving. (The harness's shutdown ends this Serve
// too, as it closes every listener.)
func TestAcceptRecoversFromRunningOutOfDescriptors(t *testing.T) {
	h := newHarness(t)
	h.pair(fake.Config{}, fake.Config{})
	srv := h.start(defaultConfig())
	ln, err := h.nw.Listen("pdlb:8001")
	if err != nil {
		t.Fatal(err)
	}
	failing := &failingListener{Listener: ln, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
	failing.fails.Store(3)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(failing) }()
	cl := &fasthttp.HostClient{Addr: "pdlb:8001", Dial: h.nw.Dial}
	defer cl.CloseIdleConnections()
	status, _, err := cl.GetTimeout(nil, "http://pdlb:8001/health", 5*time.Second)
	if err != nil || status != fasthttp.StatusOK {
		t.Fatalf("got %d, %v after the accepts failed; want 200", status, err)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
}
