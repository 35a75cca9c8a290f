package fake

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"go.uber.org/goleak"
)

// testDeadline bounds every client exchange, so a broken fake fails a test
// instead of hanging it. It is a failure deadline, never a way to wait.
const testDeadline = 10 * time.Second

// Addresses of the standard PD pair.
const (
	prefillAddr = "prefill:30000"
	decodeAddr  = "decode:30010"
)

// leakOptions ignore what is not a leak of the fakes: fasthttp's
// process-wide Date header updater, started once and never stopped, and the
// timer callbacks of in-memory pipe deadlines, which only close a channel
// and may fire after their connection is closed.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreTopFunction("github.com/valyala/fasthttp/fasthttputil.(*pipeDeadline).set.func1"),
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}

// startServer starts a server for cfg on addr of n and closes it at the end
// of the test.
func startServer(t *testing.T, n *Network, addr string, cfg Config) *Server {
	t.Helper()
	s := New(cfg)
	if err := s.Start(n, addr); err != nil {
		t.Fatalf("cannot start %s: %v", addr, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("cannot close %s: %v", addr, err)
		}
	})
	return s
}

// newPD starts a prefill on prefillAddr (bootstrap prefill:8998) and a
// decode on decodeAddr, on a fresh in-memory network.
func newPD(t *testing.T, pcfg, dcfg Config) (*Network, *Server, *Server) {
	t.Helper()
	n := NewNetwork()
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	p := startServer(t, n, prefillAddr, pcfg)
	d := startServer(t, n, decodeAddr, dcfg)
	return n, p, d
}

// result is an HTTP answer.
type result struct {
	status      int
	contentType string
	body        string
}

// roundTrip does one request on a connection of its own. It does not use
// t, so it may run on any goroutine.
func roundTrip(n *Network, method, addr, path, body string) (result, error) {
	conn, br, err := send(n, method, addr, path, body)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	var resp fasthttp.Response
	if err := resp.Read(br); err != nil {
		return result{}, fmt.Errorf("cannot read the answer of %s %s%s: %w", method, addr, path, err)
	}
	return result{resp.StatusCode(), string(resp.Header.ContentType()), string(resp.Body())}, nil
}

// send dials addr and writes a request.
func send(n *Network, method, addr, path, body string) (net.Conn, *bufio.Reader, error) {
	conn, err := n.Dial(addr)
	if err != nil {
		return nil, nil, err
	}
	if err := conn.SetDeadline(time.Now().Add(testDeadline)); err != nil {
		conn.Close()
		return nil, nil, err
	}
	if err := writeRequest(conn, method, addr, path, body); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, bufio.NewReader(conn), nil
}

// writeRequest writes a request to addr on conn.
func writeRequest(conn net.Conn, method, addr, path, body string) error {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://" + addr + path)
	if body != "" {
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	bw := bufio.NewWriter(conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("cannot send %s %s%s: %w", method, addr, path, err)
	}
	return nil
}

// do is roundTrip failing the test on error.
func do(t *testing.T, n *Network, method, addr, path, body string) result {
	t.Helper()
	res, err := roundTrip(n, method, addr, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// both sends the prefill and decode bodies to their servers at the same
// time, as a load balancer does, and returns both answers.
func both(t *testing.T, n *Network, path, pbody, dbody string) (p, d result) {
	t.Helper()
	return bothTo(t, n, prefillAddr, path, pbody, dbody)
}

// bothTo is both with the prefill at paddr.
func bothTo(t *testing.T, n *Network, paddr, path, pbody, dbody string) (p, d result) {
	t.Helper()
	return atOnce(t,
		func() (result, error) { return roundTrip(n, "POST", paddr, path, pbody) },
		func() (result, error) { return roundTrip(n, "POST", decodeAddr, path, dbody) })
}

// atOnce runs the prefill and decode legs at the same time, as a load
// balancer does, failing the test if either fails.
func atOnce[T any](t *testing.T, prefill, decode func() (T, error)) (p, d T) {
	t.Helper()
	var perr, derr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p, perr = prefill()
	}()
	go func() {
		defer wg.Done()
		d, derr = decode()
	}()
	wg.Wait()
	if err := errors.Join(perr, derr); err != nil {
		t.Fatal(err)
	}
	return p, d
}

// sse reads a streamed answer event by event.
type sse struct {
	conn    net.Conn
	br      *bufio.Reader
	header  fasthttp.ResponseHeader
	pending []byte
	eof     bool
}

// openSSE sends a request and reads the answer's header.
func openSSE(n *Network, addr, path, body string) (*sse, error) {
	conn, br, err := send(n, "POST", addr, path, body)
	if err != nil {
		return nil, err
	}
	s := &sse{conn: conn, br: br}
	if err := s.header.Read(br); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cannot read the stream header: %w", err)
	}
	if cl := s.header.ContentLength(); cl >= 0 {
		s.pending = make([]byte, cl)
		_, err = io.ReadFull(br, s.pending)
		s.eof = true
	}
	return s, err
}

// next returns the next event's data, without "data: "; ok is false at
// the end of the stream.
func (s *sse) next() (data string, ok bool, err error) {
	for {
		if i := bytes.Index(s.pending, []byte("\n\n")); i >= 0 {
			ev := string(s.pending[:i])
			s.pending = s.pending[i+2:]
			if !strings.HasPrefix(ev, "data: ") {
				return "", false, fmt.Errorf("event %q lacks \"data: \"", ev)
			}
			return ev[len("data: "):], true, nil
		}
		if s.eof {
			if len(s.pending) > 0 {
				return "", false, fmt.Errorf("stream ends inside an event: %q", s.pending)
			}
			return "", false, nil
		}
		if err := s.readChunk(); err != nil {
			return "", false, err
		}
	}
}

// readChunk reads one chunk of the chunked body into pending.
func (s *sse) readChunk() error {
	line, err := s.br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("cannot read a chunk size: %w", err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
	if err != nil {
		return fmt.Errorf("bad chunk size %q: %w", line, err)
	}
	if size == 0 {
		s.eof = true
		return nil
	}
	chunk := make([]byte, size+2)
	if _, err := io.ReadFull(s.br, chunk); err != nil {
		return fmt.Errorf("cannot read a chunk: %w", err)
	}
	s.pending = append(s.pending, chunk[:size]...)
	return nil
}

// all reads the remaining events.
func (s *sse) all() ([]string, error) {
	var evs []string
	for {
		ev, ok, err := s.next()
		if err != nil || !ok {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// stream sends a streamed request and reads all its events.
func stream(n *Network, addr, path, body string) (contentType string, events []string, err error) {
	s, err := openSSE(n, addr, path, body)
	if err != nil {
		return "", nil, err
	}
	defer s.conn.Close()
	evs, err := s.all()
	return string(s.header.ContentType()), evs, err
}

// streamBoth streams the prefill and decode bodies at the same time.
func streamBoth(t *testing.T, n *Network, path, pbody, dbody string) (p, d []string) {
	t.Helper()
	events := func(addr, body string) func() ([]string, error) {
		return func() ([]string, error) {
			_, evs, err := stream(n, addr, path, body)
			return evs, err
		}
	}
	return atOnce(t, events(prefillAddr, pbody), events(decodeAddr, dbody))
}

// parseJSON parses s, failing the test if it is not JSON.
func parseJSON(t *testing.T, s string) *fastjson.Value {
	t.Helper()
	var p fastjson.Parser
	v, err := p.Parse(s)
	if err != nil {
		t.Fatalf("not JSON: %v: %q", err, s)
	}
	return v
}

// str returns the JSON of the value at keys in v, "" if absent.
func str(v *fastjson.Value, keys ...string) string {
	x := v.Get(keys...)
	if x == nil {
		return ""
	}
	return x.String()
}

// pdBody is a body with the three bootstrap fields added to fields.
func pdBody(fields, host, port string, room uint64) string {
	return "{" + fields + `,"bootstrap_host":"` + host + `","bootstrap_port":` + port +
		`,"bootstrap_room":` + strconv.FormatUint(room, 10) + "}"
}

// serveFunc serves h on addr of n until the end of the test.
func serveFunc(t *testing.T, n *Network, addr string, h fasthttp.RequestHandler) {
	t.Helper()
	ln, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, MaxIdleWorkerDuration: maxIdleWorker, Logger: quiet{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		_ = ln.Close()
		<-done
	})
}

// newCtx is a request context for calling a handler directly.
func newCtx(method, path, body string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	ctx.Request.SetBodyString(body)
	return &ctx
}

// quiet is a fasthttp.Logger that drops everything.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// within fails the test unless ch is ready before testDeadline.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testDeadline):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}
