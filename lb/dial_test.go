package lb

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// blockingDial is a dial that holds every caller until release is closed,
// then hands out one end of a pipe. It records what it made, and how many
// dials ran at once.
type blockingDial struct {
	release chan struct{}
	mu      sync.Mutex
	made    []*closeRecorder
	now     atomic.Int32
	most    atomic.Int32
}

type closeRecorder struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeRecorder) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func newBlockingDial() *blockingDial { return &blockingDial{release: make(chan struct{})} }

func (b *blockingDial) dial(string, time.Duration) (net.Conn, error) {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	<-b.release
	c1, c2 := net.Pipe()
	_ = c2.Close()
	c := &closeRecorder{Conn: c1}
	b.mu.Lock()
	b.made = append(b.made, c)
	b.mu.Unlock()
	return c, nil
}

// startDialers makes dialers whose goroutines the test stops, and waits for,
// when it ends.
func startDialers(t *testing.T, dial fasthttp.DialFuncWithTimeout) *dialers {
	quit := make(chan struct{})
	d := newDialers(dial, time.Minute, quit)
	t.Cleanup(func() {
		close(quit)
		waitFor(t, "the dialer goroutines to exit", func() bool { return d.counts() == [2]int{0, 0} })
	})
	return d
}

// counts returns how many dialer goroutines run, and how many of them idle.
func (d *dialers) counts() [2]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return [2]int{d.running, len(d.idle)}
}

func (d *dialers) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// dialAsync dials with d in the background and sends the outcome to errs.
func dialAsync(d *dialers, errs chan<- error) {
	go func() {
		c, err := d.Dial("worker:1", 5*time.Second)
		if err == nil {
			_ = c.Close()
		}
		errs <- err
	}()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Dials one after another reuse one goroutine.
func TestDialersReuseTheirGoroutine(t *testing.T) {
	b := newBlockingDial()
	close(b.release)
	d := startDialers(t, b.dial)
	for range 20 {
		c, err := d.Dial("worker:1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		waitFor(t, "the dialer to be idle again", func() bool { return d.counts()[1] == 1 })
	}
	if got := d.counts(); got != [2]int{1, 1} {
		t.Fatalf("running, idle = %v after 20 dials in turn; want one goroutine, idle", got)
	}
}

// A burst runs at most maxDialers dials at once; the rest wait their turn,
// and every caller gets its connection.
func TestDialersBoundTheirGoroutines(t *testing.T) {
	b := newBlockingDial()
	d := startDialers(t, b.dial)
	const callers = maxDialers + 20
	errs := make(chan error, callers)
	for range callers {
		dialAsync(d, errs)
	}
	waitFor(t, "the burst to fill the dialers and queue the rest", func() bool {
		return b.now.Load() == maxDialers && d.queued() == callers-maxDialers
	})
	time.Sleep(50 * time.Millisecond) // let any goroutine too many start
	if got := d.counts(); got != [2]int{maxDialers, 0} {
		t.Fatalf("running, idle = %v with every dialer busy; want %d, 0", got, maxDialers)
	}
	close(b.release)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if most := b.most.Load(); most != maxDialers {
		t.Fatalf("%d dials ran at once; want at most (and here exactly) %d", most, maxDialers)
	}
}

// A dial beyond a full queue runs on its caller's goroutine at once.
func TestDialBeyondTheQueueRunsOnTheCaller(t *testing.T) {
	b := newBlockingDial()
	d := startDialers(t, b.dial)
	const callers = maxDialers + maxQueuedDials + 1
	errs := make(chan error, callers)
	for range callers - 1 {
		dialAsync(d, errs)
	}
	waitFor(t, "the dialers and the queue to fill", func() bool {
		return b.now.Load() == maxDialers && d.queued() == maxQueuedDials
	})
	dialAsync(d, errs)
	waitFor(t, "the last caller to dial itself", func() bool { return b.now.Load() == maxDialers+1 })
	close(b.release)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A caller whose time runs out first gets a dial timeout, and the connection
// made for it meanwhile is closed, not leaked.
func TestAbandonedDialIsClosed(t *testing.T) {
	b := newBlockingDial()
	d := startDialers(t, b.dial)
	_, err := d.Dial("worker:1", 20*time.Millisecond)
	if !errors.Is(err, fasthttp.ErrDialTimeout) {
		t.Fatalf("got %v; want %v", err, fasthttp.ErrDialTimeout)
	}
	close(b.release)
	waitFor(t, "the late connection to be made and closed", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.made) == 1 && b.made[0].closed.Load()
	})
}

// A dial takes at most the connect timeout, however long its request may
// still run.
func TestDialTakesAtMostTheConnectTimeout(t *testing.T) {
	b := newBlockingDial()
	d := startDialers(t, b.dial)
	d.connectTimeout = 20 * time.Millisecond
	if _, err := d.Dial("worker:1", time.Hour); !errors.Is(err, fasthttp.ErrDialTimeout) {
		t.Fatalf("got %v; want %v", err, fasthttp.ErrDialTimeout)
	}
	close(b.release)
}

// An idle goroutine exits after idleFor; the next dial starts another.
func TestIdleDialerExits(t *testing.T) {
	b := newBlockingDial()
	close(b.release)
	d := startDialers(t, b.dial)
	d.idleFor = 10 * time.Millisecond
	for range 2 {
		c, err := d.Dial("worker:1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		waitFor(t, "the idle dialer to exit", func() bool { return d.counts() == [2]int{0, 0} })
	}
}

// Once the server quits, the goroutines exit, a dial waiting on one runs on
// its caller's goroutine instead, and so do later dials.
func TestDialersQuit(t *testing.T) {
	b := newBlockingDial()
	quit := make(chan struct{})
	d := newDialers(b.dial, time.Minute, quit)
	type result struct {
		conn net.Conn
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, err := d.Dial("worker:1", 5*time.Second)
		got <- result{c, err}
	}()
	waitFor(t, "a dial to start", func() bool { return b.now.Load() == 1 })
	close(quit)
	waitFor(t, "the caller to dial itself", func() bool { return b.now.Load() == 2 })
	close(b.release)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	waitFor(t, "the dialer goroutine to exit", func() bool { return d.counts() == [2]int{0, 0} })
	waitFor(t, "the dialer's late connection to be closed", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.made) == 2 && b.made[0].closed.Load() != b.made[1].closed.Load()
	})
	if r.conn.(*closeRecorder).closed.Load() {
		t.Fatal("the caller got the connection that was closed")
	}
	_ = r.conn.Close()
	c, err := d.Dial("worker:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if got := d.counts(); got != [2]int{0, 0} {
		t.Fatalf("running, idle = %v after quit; want no goroutine", got)
	}
}

// TestWorkersOnIPv6 serves a request through workers that listen on the
// IPv6 loopback only, over real TCP, with pdlb's defaults: the request
// path, the warm-up, the health checks and the bootstrap registry (both its
// /server_info lookup and the bootstrap server) must all reach IPv6.
func TestWorkersOnIPv6(t *testing.T) {
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %s", err)
	}
	_ = probe.Close()
	nw := fake.NewTCPNetwork()
	start := func(cfg fake.Config) *fake.Server {
		cfg.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
		s := fake.New(cfg)
		if err := s.Start(nw, "[::1]:0"); err != nil {
			t.Fatalf("cannot start fake %s: %s", cfg.Role, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	p := start(fake.Config{Role: fake.RolePrefill, BootstrapAddr: "[::1]:0", KVTimeout: 5 * time.Second})
	d := start(fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})

	// No bootstrap port: pdlb asks the prefill's /server_info for it.
	srv, err := New(Config{
		Prefill: []PrefillSpec{{URL: "http://" + p.Addr()}},
		Decode:  []string{"http://" + d.Addr()},
	}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := srv.registry.WaitReady(ctx, 0)
	if err != nil {
		t.Fatalf("the registry cannot reach the prefill over IPv6: %s", err)
	}
	if st.Port != p.BootstrapPort() {
		t.Fatalf("got bootstrap port %d; want %d, from /server_info", st.Port, p.BootstrapPort())
	}

	cl := &fasthttp.HostClient{Addr: ln.Addr().String(), DialDualStack: true}
	defer cl.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + ln.Addr().String() + "/generate")
	req.SetBodyString(`{"text":"hi","sampling_params":{"max_new_tokens":2}}`)
	if err := cl.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("got %d %s; want 200", resp.StatusCode(), resp.Body())
	}
	// The warm-up may have sent one more pair of its own.
	waitFor(t, "health checks of both workers", func() bool { return p.Stats().Health > 0 && d.Stats().Health > 0 })
	if p.Stats().Generate == 0 || d.Stats().Generate == 0 {
		t.Fatalf("got %d prefill and %d decode generations; want the request on both", p.Stats().Generate, d.Stats().Generate)
	}
}

// Workers behind https are reached over TLS on every path: both legs and
// the info routes.
func TestWorkersOverHTTPS(t *testing.T) {
	h := newHarness(t)
	certPEM, keyPEM, err := fasthttp.GenerateTestCertificate("localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	for _, addr := range []string{"prefill-0:30000", "decode-0:30010"} {
		ln, err := h.nw.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			served.Add(1)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"text": "over tls", "data": []}`)
		}}
		go func() { _ = srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	cfg := defaultConfig()
	cfg.Prefill = []PrefillSpec{{URL: "https://prefill-0:30000", BootstrapPort: 8998}}
	cfg.Decode = []string{"https://decode-0:30010"}
	cfg.WorkerTLS = &tls.Config{InsecureSkipVerify: true} // a test certificate
	h.start(cfg)
	if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "text").String() != "over tls" {
		t.Fatalf("/generate got %d %s", r.status, r.body)
	}
	if r := h.do(fasthttp.MethodGet, "/v1/models", ""); r.status != fasthttp.StatusOK {
		t.Fatalf("/v1/models got %d %s", r.status, r.body)
	}
	// The prefill's leg may end after the decode has answered.
	waitFor(t, "both legs and the info call over TLS", func() bool { return served.Load() == 3 })
}
