package lb

import (
	"bufio"
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
	"pdlb/lb/wire"
)

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
	// Each piece is a write of its own, so a segment of its own (Go's
	// sockets send at once); whether pdlb's read finds one or several is
	// the scheduler's: wire's TestRequestInPiecesIsReadWhole makes each
	// piece come after a read that found none.
	send := func(pieces ...string) {
		t.Helper()
		for _, p := range pieces {
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
	send(request(strings.Repeat("long ", 4*(4<<10)/5))) // past wire's read-ahead buffer of 4 KiB
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
	if got >= int64(len(answer)) || wire.IsTimeout(err) {
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
	for size := wire.ClientWriteBufferSize - 400; size <= wire.ClientWriteBufferSize+2; size++ {
		send(request(size, ""))
		expect(size)
	}
	for _, size := range []int{2 * wire.ClientWriteBufferSize, 2*wire.ClientWriteBufferSize + 1, 64 << 10, 1 << 20} {
		send(request(size, ""))
		expect(size)
	}
	send(request(3000, ""), request(100, ""), request(wire.ClientWriteBufferSize, ""), request(5000, ""))
	expect(3000, 100, wire.ClientWriteBufferSize, 5000)
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
