package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"pdlb/bench/fake"
	"pdlb/lb/internal/loopback"
)

func TestMain(m *testing.M) {
	// Start fasthttp's process-wide Date clock here, outside any synctest
	// bubble: started in one, it would belong to that bubble and tick in
	// it forever.
	var date fasthttp.ResponseHeader
	date.AppendBytes(nil)
	goleak.VerifyTestMain(m,
		// fasthttp's own housekeepers: each sleeps out its period (up to
		// 10 s) before noticing there is nothing left to clean, then exits.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The process-wide Date header clock, started once and never stopped.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// The DNS cache of fasthttp's default dialer, which pdlb uses to
		// reach workers over TCP: one per process, never stopped.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// inBubble runs f in a synctest bubble, where time is a fake clock that
// jumps ahead whenever every goroutine of the test waits: the timeouts a
// test waits out take no real time. Its harness must be in memory (not
// tcpWorkers, nor serveTCP): a goroutine blocked on a socket is not known to
// wait, and time would not move.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		// Registered first, so run last, once pdlb and the fakes are shut
		// down: fasthttp's housekeepers (a HostClient's connsCleaner, a
		// Server's idle worker cleaner) notice they are done only when
		// their period ends, and the bubble ends only when they have. The
		// clock is fake: this costs no real time.
		t.Cleanup(func() { <-time.After(housekeeping) })
		bubbled.Store(t, true)
		t.Cleanup(func() { bubbled.Delete(t) })
		f(t)
	})
}

// bubbled holds the tests that inBubble runs, so that settled knows how to
// wait for them.
var bubbled sync.Map // *testing.T → true

// settled checks that cond holds once what the test set going is over. In
// a bubble that is when every goroutine of the test waits (synctest.Wait);
// over sockets, where no goroutine is known to wait, it is waitFor's
// bounded wait.
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if _, ok := bubbled.Load(t); !ok {
		waitFor(t, what, cond)
		return
	}
	synctest.Wait()
	if !cond() {
		t.Fatalf("not so once the test's goroutines all wait: %s", what)
	}
}

// housekeeping is longer than any period of fasthttp's housekeepers in a
// test: the idle timeouts of the clients and servers it builds.
const housekeeping = time.Hour

// harness runs a pdlb Server and its backends on an in-memory network.
type harness struct {
	t   testing.TB
	nw  *fake.Network
	srv *Server
	cl  *fasthttp.HostClient
	// decode is the fake decode started by pair.
	decode *fake.Server
	// noRoomRefusals is how many requests without a room the decodes may
	// refuse: none, unless a test provokes it (SGLang's 400 "Disaggregated
	// request received without bootstrap room id").
	noRoomRefusals uint64
	// wrapListener, when set, wraps pdlb's listener; wrapWorker, each
	// connection pdlb dials to a worker.
	wrapListener func(net.Listener) net.Listener
	wrapWorker   func(addr string, c net.Conn) net.Conn
	// dialFault, when set, is asked before each of pdlb's dials (worker
	// calls, health probes, the bootstrap registry): a non-nil error fails
	// the dial with it.
	dialFault func(addr string) error
	// tcpWorkers, set before start, has pdlb reach the workers over
	// loopback TCP (bridgeDial), so that its worker connections are
	// sockets, as in production. bridged holds the bridges' connections,
	// pumps their goroutines.
	tcpWorkers bool
	// served is closed when each Serve of serveTCP has returned.
	served   []chan struct{}
	bridgeMu sync.Mutex
	bridged  []net.Conn
	pumps    sync.WaitGroup
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	return &harness{t: t, nw: fake.NewNetwork()}
}

// fake starts a fake SGLang server on addr.
func (h *harness) fake(addr string, cfg fake.Config) *fake.Server {
	h.t.Helper()
	cfg.Log = zerolog.New(zerolog.NewTestWriter(h.t)).Level(zerolog.WarnLevel)
	s := fake.New(cfg)
	if err := s.Start(h.nw, addr); err != nil {
		h.t.Fatalf("cannot start fake %s on %s: %s", cfg.Role, addr, err)
	}
	h.t.Cleanup(func() { _ = s.Close() })
	return s
}

// pair starts a fake prefill (bootstrap port 8998) and a fake decode.
func (h *harness) pair(prefill, decode fake.Config) (p, d *fake.Server) {
	h.t.Helper()
	prefill.Role, decode.Role = fake.RolePrefill, fake.RoleDecode
	if prefill.KVTimeout == 0 {
		prefill.KVTimeout = 5 * time.Second
	}
	if decode.KVTimeout == 0 {
		decode.KVTimeout = 5 * time.Second
	}
	p = h.fake("prefill-0:30000", prefill)
	h.decode = h.fake("decode-0:30010", decode)
	d = h.decode
	// pdlb must never make a decode refuse a request for lacking a room.
	h.t.Cleanup(func() {
		if n := d.Stats().RejectedNoRoom; n != h.noRoomRefusals {
			h.t.Errorf("the decode refused %d requests without a bootstrap room; want %d", n, h.noRoomRefusals)
		}
	})
	return p, d
}

// backend serves handler on addr, for tests that need a backend the fakes
// cannot play.
func (h *harness) backend(addr string, handler fasthttp.RequestHandler) {
	h.t.Helper()
	ln, err := h.nw.Listen(addr)
	if err != nil {
		h.t.Fatal(err)
	}
	quiet := zerolog.Nop() // connections the tests cut are no news
	srv := &fasthttp.Server{Handler: handler, CloseOnShutdown: true, Logger: &quiet}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		<-done
	})
}

// defaultConfig is the pair started by pair, with its bootstrap port given.
// Warm-up and active health checks are off, so the workers see only the
// tests' own requests and their state changes only when a test says so;
// the tests of those features turn them on.
func defaultConfig() Config {
	return Config{
		Prefill:     []PrefillSpec{{URL: "http://prefill-0:30000", BootstrapPort: 8998}},
		Decode:      []string{"http://decode-0:30010"},
		NoPrewarm:   true,
		HealthCheck: HealthCheckConfig{Disable: true},
	}
}

// warmConfig is defaultConfig with warm-up on, as pdlb runs by default.
func warmConfig() Config {
	cfg := defaultConfig()
	cfg.NoPrewarm = false
	return cfg
}

// start runs pdlb with cfg on the harness network, logging warnings to the
// test log.
func (h *harness) start(cfg Config) *Server {
	h.t.Helper()
	return h.startLogged(cfg, zerolog.New(zerolog.NewTestWriter(h.t)).Level(zerolog.WarnLevel))
}

// startLogged runs pdlb with cfg and log on the harness network.
func (h *harness) startLogged(cfg Config, log zerolog.Logger) *Server {
	h.t.Helper()
	cfg.Dial = h.nw.Dial
	if h.tcpWorkers {
		cfg.Dial = h.bridgeDial
		h.t.Cleanup(h.closeBridges) // once pdlb has shut down
	}
	if wrap := h.wrapWorker; wrap != nil {
		dial := cfg.Dial
		cfg.Dial = func(addr string) (net.Conn, error) {
			c, err := dial(addr)
			if err != nil {
				return nil, err
			}
			return wrap(addr, c), nil
		}
	}
	if fault := h.dialFault; fault != nil {
		dial := cfg.Dial
		cfg.Dial = func(addr string) (net.Conn, error) {
			if err := fault(addr); err != nil {
				return nil, err
			}
			return dial(addr)
		}
	}
	srv, err := New(cfg, log)
	if err != nil {
		h.t.Fatalf("cannot build the server: %s", err)
	}
	ln, err := h.nw.Listen("pdlb:8000")
	if err != nil {
		h.t.Fatal(err)
	}
	if h.wrapListener != nil {
		ln = h.wrapListener(ln)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	h.srv = srv
	h.cl = &fasthttp.HostClient{Addr: "pdlb:8000", Dial: func(string) (net.Conn, error) { return h.nw.Dial("pdlb:8000") }}
	h.t.Cleanup(func() {
		h.cl.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			h.t.Errorf("shutdown: %s", err)
		}
		<-served
		for _, ch := range h.served {
			<-ch
		}
	})
	return srv
}

// bridgeDial dials the in-memory worker at addr and returns a loopback TCP
// connection whose far end is pumped to it both ways; either end closing
// closes both.
func (h *harness) bridgeDial(addr string) (net.Conn, error) {
	worker, err := h.nw.Dial(addr)
	if err != nil {
		return nil, err
	}
	near, far, err := loopback.Pair()
	if err != nil {
		worker.Close()
		return nil, err
	}
	pump := func(dst, src net.Conn) {
		defer h.pumps.Done()
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	h.bridgeMu.Lock()
	h.bridged = append(h.bridged, worker, far)
	h.bridgeMu.Unlock()
	h.pumps.Add(2)
	go pump(worker, far)
	go pump(far, worker)
	return near, nil
}

// closeBridges closes what is left of the bridges (pooled connections idle
// in the workers' keep-alive) and waits for their pumps.
func (h *harness) closeBridges() {
	h.bridgeMu.Lock()
	for _, c := range h.bridged {
		c.Close()
	}
	h.bridgeMu.Unlock()
	h.pumps.Wait()
}

// serveTCP has srv serve on a loopback TCP listener too, and returns its
// address.
func (h *harness) serveTCP(srv *Server) string {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	h.served = append(h.served, served) // ends with pdlb's shutdown
	return ln.Addr().String()
}

// waitBootstrap waits until the registry knows the first prefill.
func (h *harness) waitBootstrap() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.srv.registry.WaitReady(ctx, 0); err != nil {
		h.t.Fatalf("the bootstrap registry is not ready: %s", err)
	}
}

// waitFirstReads waits (settled) until the registry has read every
// prefill's bootstrap server once, ready or not: until then pdlb avoids a
// prefill it has not heard from (pickPrefill), which tests of broken
// prefills must not race.
func (h *harness) waitFirstReads() {
	h.t.Helper()
	for i := range h.srv.prefills.backends() {
		settled(h.tt(), fmt.Sprintf("the registry's first read of prefill %d", i), func() bool {
			st := h.srv.registry.State(i)
			return st.Ready || !st.Updated.IsZero()
		})
	}
}

// tt is the harness's test, for the helpers that take a *testing.T.
func (h *harness) tt() *testing.T {
	t, ok := h.t.(*testing.T)
	if !ok {
		panic("BUG: a harness of a benchmark waits as a test does")
	}
	return t
}

// reply is a finished response, copied out of fasthttp's pools.
type reply struct {
	status int
	header *fasthttp.ResponseHeader
	body   []byte
	took   time.Duration
}

// do sends a request to pdlb and returns its whole answer. A request that
// gets none fails the test and returns a reply of status 0; it does not
// stop the goroutine (t.Fatal would), so a test may call do from a
// goroutine of its own, and one waiting for its reply is not left hanging.
func (h *harness) do(method, path, body string, headers ...string) reply {
	h.t.Helper()
	r, err := h.tryDo(method, path, body, headers...)
	if err != nil {
		h.t.Errorf("%s %s: %s", method, path, err)
		r.header = &fasthttp.ResponseHeader{} // so the test's checks fail, not panic
	}
	return r
}

// tryDo is do for a goroutine other than the test's: it returns the
// error instead of failing the test.
func (h *harness) tryDo(method, path, body string, headers ...string) (reply, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://pdlb:8000" + path)
	req.Header.SetContentType("application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	req.SetBodyString(body)
	start := time.Now()
	if err := h.cl.DoTimeout(req, resp, 20*time.Second); err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode(), header: &fasthttp.ResponseHeader{}, body: append([]byte(nil), resp.Body()...), took: time.Since(start)}
	resp.Header.CopyTo(r.header)
	return r, nil
}

func (h *harness) post(path, body string, headers ...string) reply {
	h.t.Helper()
	return h.do(fasthttp.MethodPost, path, body, headers...)
}
