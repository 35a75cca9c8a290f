package lb

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb/wire"
)

func TestDefaultMaxConnections(t *testing.T) {
	f := func(nofile uint64, workers, maxConnsPerWorker, want int) {
		t.Helper()
		if got := defaultMaxConnections(nofile, workers, maxConnsPerWorker); got != want {
			t.Errorf("defaultMaxConnections(%d, %d, %d) got %d; want %d", nofile, workers, maxConnsPerWorker, got, want)
		}
	}
	// Issue 19's limit, with two workers at the default 4096 connections
	// each: 20000-64-16 spare, less the pools' 8192.
	f(20000, 2, 4096, 11728)
	// Sixteen workers could take more than the spare between them: a
	// third is left for clients, two thirds for their worker connections.
	f(20000, 16, 4096, (20000-64-8*16)/3)
	// Small pools leave the rest to clients.
	f(20000, 2, 16, 20000-64-16-32)
	// Linux's usual hard limit, 4096 (soft 1024, which Go raises).
	f(4096, 2, 4096, (4096-64-16)/3)
	// A limit too small for the reserve still admits a few.
	f(64, 2, 4096, minMaxConnections)
	// A container's million descriptors are not a million connections'
	// memory.
	f(1<<20, 2, 4096, maxMaxConnections)
	f(1<<63, 2, 4096, maxMaxConnections) // no overflow
}

// waitConns waits until srv's budget counts open connections, of them
// first waiting for a first request, next for their next one, and rest for
// the rest of the one they are sending.
func waitConns(t *testing.T, srv *Server, open, first, next, rest int) {
	t.Helper()
	want := wire.Census{Open: open, First: first, Next: next, Rest: rest}
	settled(t, fmt.Sprintf("%+v connections", want), func() bool {
		got := srv.conns.Census()
		if got != want {
			t.Logf("got %+v connections; want %+v", got, want) // the last is the one that counts
		}
		return got == want
	})
}

// rawClient is a client connection to pdlb written and read by hand.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, dial func() (net.Conn, error)) *rawClient {
	t.Helper()
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawClient{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("cannot send: %s", err)
	}
}

// answer reads the next response, failing the test if none comes in time.
func (c *rawClient) answer() *fasthttp.Response {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp := &fasthttp.Response{}
	if err := resp.Read(c.br); err != nil {
		c.t.Fatalf("no answer: %s", err)
	}
	return resp
}

// get sends GET /liveness and wants its 200.
func (c *rawClient) get() {
	c.t.Helper()
	c.send("GET /liveness HTTP/1.1\r\nHost: pdlb\r\n\r\n")
	if resp := c.answer(); resp.StatusCode() != fasthttp.StatusOK {
		c.t.Fatalf("got %d %s; want 200", resp.StatusCode(), resp.Body())
	}
}

// waitClosed waits for pdlb to close the connection, with nothing more sent.
func (c *rawClient) waitClosed() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.br.Read(make([]byte, 1))
	if n > 0 || wire.IsTimeout(err) || err == nil {
		c.t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
}

// At --max-connections, a new client is served in the place of a
// connection waiting for its client: one that has sent nothing first, else
// the one waiting longest for its next request. Issue 19: 20,000 idle
// connections took every descriptor, and other clients timed out; a flood
// of empty connections, thousands a second, closed the keep-alive
// connections of real clients between two requests.
func TestIdleConnectionsMakeRoomOldestFirst(t *testing.T) {
	for _, tt := range []struct {
		name string
		// steps, in order: "dial N" connects client N, "get N" has it make
		// a request and read its answer.
		steps  []string
		closed int // the client closed for the newcomer
	}{
		{"silent, silent", []string{"dial 0", "dial 1"}, 0},
		{"idle, idle", []string{"dial 0", "get 0", "dial 1", "get 1"}, 0},
		{"idle, then silent", []string{"dial 0", "get 0", "dial 1"}, 1},
		{"silent, then idle", []string{"dial 0", "dial 1", "get 1"}, 0},
		{"a request makes it wait least", []string{"dial 0", "get 0", "dial 1", "get 0"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.pair(fake.Config{}, fake.Config{})
				cfg := defaultConfig()
				cfg.MaxConnections = 2
				srv := h.start(cfg)
				var clients []*rawClient
				served := map[int]bool{}
				for _, step := range tt.steps {
					what, n, _ := strings.Cut(step, " ")
					i := int(n[0] - '0')
					switch what {
					case "dial":
						clients = append(clients, dialRaw(t, func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") }))
					case "get":
						clients[i].get()
						served[i] = true
					}
					// Each step is done, for pdlb too, before the next.
					waitConns(t, srv, len(clients), len(clients)-len(served), len(served), 0)
				}

				if r := h.do(fasthttp.MethodGet, "/liveness", ""); r.status != fasthttp.StatusOK {
					t.Fatalf("the new client got %d %s; want 200", r.status, r.body)
				}
				clients[tt.closed].waitClosed()
				clients[1-tt.closed].get() // the other one is still served
				if got := srv.connsEvicted.Get(); got != 1 {
					t.Errorf("got %d connections evicted; want 1", got)
				}
				waitConns(t, srv, 2, 0, 2, 0)
			})
		})
	}
}

// At --max-connections with every connection's request being served, a
// new one is refused at once with a JSON 503, and closed; the busy ones are
// not touched.
func TestNewConnectionIsRefusedWhenAllAreBusy(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	for _, tcp := range []bool{false, true} {
		name := "in memory"
		if tcp {
			name = "tcp"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			release, arrived := holdWorkers(h)
			cfg := defaultConfig()
			cfg.MaxConnections = 1
			srv := h.start(cfg)
			t.Cleanup(release) // before pdlb's shutdown, should the test fail
			dial := func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") }
			if tcp {
				addr := h.serveTCP(srv)
				dial = func() (net.Conn, error) { return net.Dial("tcp", addr) }
			}
			busy := dialRaw(t, dial)
			body := `{"text": "a"}`
			busy.send("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			<-arrived
			waitConns(t, srv, 1, 0, 0, 0)

			refused := dialRaw(t, dial)
			// It may be refused and closed before its request is sent: a
			// write error is no failure.
			_, _ = io.WriteString(refused.conn, "GET /liveness HTTP/1.1\r\nHost: pdlb\r\n\r\n")
			resp := refused.answer()
			msg := gjson.GetBytes(resp.Body(), "error.message").String()
			if resp.StatusCode() != fasthttp.StatusServiceUnavailable || !resp.ConnectionClose() ||
				string(resp.Header.Peek("Retry-After")) != "1" || string(resp.Header.ContentType()) != "application/json" ||
				gjson.GetBytes(resp.Body(), "error.code").Int() != fasthttp.StatusServiceUnavailable ||
				!strings.Contains(msg, "--max-connections") {
				t.Fatalf("got %d %s\n%s; want a JSON 503 naming --max-connections, closing", resp.StatusCode(), resp.Body(), &resp.Header)
			}
			refused.waitClosed()

			release()
			if resp := busy.answer(); resp.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("the busy connection got %d %s; want 200", resp.StatusCode(), resp.Body())
			}
			if srv.connsRefused.Get() != 1 || srv.connsEvicted.Get() != 0 || srv.errorsByReason[reasonTooManyConnections].Get() != 1 {
				t.Errorf("got %d refused, %d evicted, %d too_many_connections errors; want 1, 0, 1",
					srv.connsRefused.Get(), srv.connsEvicted.Get(), srv.errorsByReason[reasonTooManyConnections].Get())
			}
			waitConns(t, srv, 1, 0, 1, 0)
		})
	}
}

// holdWorkers serves the pair's addresses with workers that hold every
// generation until release, telling arrived of each decode call.
func holdWorkers(h *harness) (release func(), arrived <-chan struct{}) {
	held := make(chan struct{})
	decoded := make(chan struct{}, 16)
	hold := func(decode bool) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if decode {
				decoded <- struct{}{}
			}
			<-held
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "b", "meta_info": {}}`)
		}
	}
	h.backend("prefill-0:30000", hold(false))
	h.backend("decode-0:30010", hold(true))
	return sync.OnceFunc(func() { close(held) }), decoded
}

// A connection sending its request slowly waits for its client too, and
// makes room as the others do, the one waiting longest first: a header
// sent slowly (slowloris), or the rest of a body pdlb reads itself, whose
// request is then accounted as closed for room. A flood of slow senders
// would otherwise hold every place until --client-read-timeout-secs.
func TestSlowSendersMakeRoom(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.MaxConnections = 2
		srv := h.start(cfg)
		dial := func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") }
		body := dialRaw(t, dial)
		body.send("POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat(" ", 20000))
		h.waitMemory(32 << 10) // pdlb reads it
		waitConns(t, srv, 1, 0, 0, 1)
		header := dialRaw(t, dial)
		header.send("GET /liveness HTTP/1.1\r\n") // the rest of its header never
		waitConns(t, srv, 2, 0, 0, 2)

		// A newcomer takes the place of the body, waiting longest.
		c := dialRaw(t, dial)
		c.get()
		body.waitClosed()
		_ = c.conn.Close() // else, idle, it would wait longer than the next
		waitConns(t, srv, 1, 0, 0, 1)
		// Beside a keep-alive connection, which began waiting later, the header
		// sent slowly waits longest, and makes room for the next newcomer.
		dialRaw(t, dial).get()
		waitConns(t, srv, 2, 0, 1, 1)
		dialRaw(t, dial).get()
		header.waitClosed()
		if got := srv.connsEvicted.Get(); got != 2 {
			t.Fatalf("got %d connections evicted; want 2", got)
		}
		// The body's handler noticed when its read failed.
		synctest.Wait()
		if h.metric(`pdlb_requests_total{route="/generate",code="499"}`) != "1" {
			t.Fatal("the body's request was not accounted as a 499")
		}
		// Both are too_many_connections: the body's, and the header's, which
		// fasthttp reports to pdlb over an in-memory connection (over TCP its
		// read ends with net.ErrClosed, which it takes for a silent close).
		if got := h.metric(`pdlb_request_errors_total{reason="too_many_connections"}`); got != "2" {
			t.Fatalf("got %s too_many_connections errors; want 2", got)
		}
		h.waitMemory(0)
	})
}

// A keep-alive connection is closed after ClientIdleTimeout without a
// request, over TCP, where wire.ClientConn arms the socket's read deadline
// lazily (SetReadDeadline records it, the next read gives it to the
// socket): the deadline fasthttp sets for the idle wait must reach the
// socket. ClientReadTimeout is far longer, so only the idle timeout can
// close it in time.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	h := newHarness(t)
	h.pair(fake.Config{}, fake.Config{})
	cfg := defaultConfig()
	cfg.ClientIdleTimeout = 200 * time.Millisecond
	cfg.ClientReadTimeout = time.Hour
	srv := h.start(cfg)
	addr := h.serveTCP(srv)
	c := dialRaw(t, func() (net.Conn, error) { return net.Dial("tcp", addr) })
	c.get()
	c.waitClosed()
	waitConns(t, srv, 0, 0, 0, 0) // its place given back
}

// A client that left leaves no place taken: each connection's Close gives
// its place back, whoever closes it first.
func TestClosedConnectionsLeaveTheBudget(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		srv := h.start(defaultConfig())
		c := dialRaw(t, func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") })
		c.get()
		waitConns(t, srv, 1, 0, 1, 0)
		_ = c.conn.Close()
		waitConns(t, srv, 0, 0, 0, 0)
	})
}

// A budget above fasthttp's own bound on connections raises it: fasthttp
// would refuse the connections beyond with a plain-text 503 before the
// budget could make room for them.
func TestBudgetRaisesFasthttpsConcurrency(t *testing.T) {
	f := func(maxConns, want int) {
		t.Helper()
		cfg := defaultConfig()
		cfg.MaxConnections = maxConns
		srv, err := New(cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.srv.Concurrency; got != want {
			t.Errorf("--max-connections %d: got Concurrency %d; want %d", maxConns, got, want)
		}
	}
	f(100, 0) // fasthttp's default
	f(fasthttp.DefaultConcurrency, 0)
	f(fasthttp.DefaultConcurrency+1, fasthttp.DefaultConcurrency+1)
	f(-1, 0) // no budget: fasthttp's bound is the only one
}

// A request answered without its body being read (an unknown route, a
// wrong method, a control route that takes no body, a body pdlb does not
// decode) has its connection closed at once: fasthttp would drain the body at the client's
// pace, with the connection counted as served and never closed to make
// room.
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	for _, tc := range []struct{ name, head string }{
		{"unknown route", "POST /nothing HTTP/1.1\r\nHost: pdlb\r\n"},
		{"wrong method", "POST /liveness HTTP/1.1\r\nHost: pdlb\r\n"},
		{"control route", "GET /liveness HTTP/1.1\r\nHost: pdlb\r\n"},
		{"encoded body", "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Encoding: gzip\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.pair(fake.Config{}, fake.Config{})
				cfg := defaultConfig()
				cfg.MaxConnections = 1
				srv := h.start(cfg)
				c := dialRaw(t, func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") })
				c.send(tc.head + "Content-Length: 100000\r\n\r\n" + strings.Repeat(" ", 20000))
				if resp := c.answer(); !resp.ConnectionClose() {
					t.Fatalf("got %d, not closing the connection", resp.StatusCode())
				}
				c.waitClosed()
				waitConns(t, srv, 0, 0, 0, 0)
				dialRaw(t, func() (net.Conn, error) { return h.nw.Dial("pdlb:8000") }).get()
			})
		})
	}
}

// The derived budget follows the workers: a worker that joins takes its
// pooled connections' descriptors from the clients', and gives them back
// once torn down (issue 23 §1).
func TestBudgetFollowsTheWorkers(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode})
		cfg := defaultConfig()
		cfg.MaxConnsPerBackend = 100
		srv := h.start(cfg)
		srv.fileLimit = func() (uint64, error) { return 2000, nil }
		srv.membersMu.Lock()
		srv.resizeConnBudget()
		srv.membersMu.Unlock()
		if got, want := srv.conns.Max(), defaultMaxConnections(2000, 2, 100); got != want {
			t.Fatalf("two workers: budget %d; want %d", got, want)
		}
		if _, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010"}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		if got, want := srv.conns.Max(), defaultMaxConnections(2000, 3, 100); got != want {
			t.Errorf("a decode joined: budget %d; want %d", got, want)
		}
		if _, err := srv.removeWorker(roleDecode, "http://decode-1:30010", sourceAll); err != nil {
			t.Fatal(err)
		}
		time.Sleep(drainPoll) // the bubble's clock: the drain looks, and finds nothing in flight
		synctest.Wait()
		if got, want := srv.conns.Max(), defaultMaxConnections(2000, 2, 100); got != want {
			t.Errorf("the decode torn down: budget %d; want %d", got, want)
		}
		if !h.hasSeries(fmt.Sprintf("pdlb_client_connections_max %d", defaultMaxConnections(2000, 2, 100))) {
			t.Error("pdlb_client_connections_max does not follow the budget")
		}
	})
}
