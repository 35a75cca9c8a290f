package load

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// bubble runs f in a testing/synctest bubble, where the clock moves only
// when every goroutine waits: Timeout, Interval and Recheck pass at once.
// fasthttp's client and in-memory servers work there unchanged: a
// deadline is a deadline on the pipe, made in the bubble. Two things of
// fasthttp's need care: the process-wide Date clock (TestMain starts it
// outside), and the housekeepers of clients and servers, which sleep out
// their period before they see that they have nothing left to do.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		// Registered first, so run last: the housekeepers end within a
		// minute of the servers' shutdown, and the bubble with them.
		t.Cleanup(func() { time.Sleep(time.Minute) }) // on the bubble's clock
		f(t)
	})
}

// answer is what a fake worker sends on one route; nil means 404.
type answer struct {
	status int
	body   string
	// hang holds the request until the end of the test.
	hang bool
}

func ok(body string) *answer { return &answer{status: fasthttp.StatusOK, body: body} }

// hit is one request a fake worker received.
type hit struct {
	uri  string
	auth string
	at   time.Time
}

// fake is an SGLang worker's load routes, answering what the test sets.
type fake struct {
	loads, getLoad atomic.Pointer[answer]
	hits           chan hit
	release        chan struct{}
}

func (f *fake) handle(ctx *fasthttp.RequestCtx) {
	var a *answer
	switch string(ctx.Path()) {
	case pathLoads:
		a = f.loads.Load()
	case pathGetLoad:
		a = f.getLoad.Load()
	}
	select {
	case f.hits <- hit{uri: string(ctx.RequestURI()), auth: string(ctx.Request.Header.Peek("Authorization")), at: time.Now()}:
	default:
		panic("BUG: the test reads too few hits")
	}
	if a == nil {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"detail":"Not Found"}`)
		return
	}
	if a.hang {
		<-f.release
	}
	ctx.SetStatusCode(a.status)
	ctx.SetBodyString(a.body)
}

// takeHits returns the requests received so far.
func (f *fake) takeHits() []string {
	var got []string
	for {
		select {
		case h := <-f.hits:
			got = append(got, h.uri)
		default:
			return got
		}
	}
}

// network maps addresses to in-memory fake workers.
type network struct {
	mu    sync.Mutex
	lns   map[string]*fasthttputil.InmemoryListener
	stops map[string]func()
}

func newNetwork() *network {
	return &network{lns: map[string]*fasthttputil.InmemoryListener{}, stops: map[string]func(){}}
}

func (nw *network) dial(addr string, _ time.Duration) (net.Conn, error) {
	nw.mu.Lock()
	ln := nw.lns[addr]
	nw.mu.Unlock()
	if ln == nil {
		return nil, fmt.Errorf("dial %s: connection refused", addr)
	}
	return ln.Dial()
}

// serve starts a fake worker on addr with the given answers, until the
// end of the test or down(addr).
func (nw *network) serve(t *testing.T, addr string, loads, getLoad *answer) *fake {
	t.Helper()
	f := &fake{hits: make(chan hit, 64), release: make(chan struct{})}
	f.loads.Store(loads)
	f.getLoad.Store(getLoad)
	ln := fasthttputil.NewInmemoryListener()
	quiet := zerolog.Nop()
	srv := &fasthttp.Server{Handler: f.handle, CloseOnShutdown: true, Logger: &quiet}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(f.release)
			_ = srv.Shutdown()
			_ = ln.Close()
			<-done
		})
	}
	nw.mu.Lock()
	nw.lns[addr], nw.stops[addr] = ln, stop
	nw.mu.Unlock()
	t.Cleanup(stop)
	return f
}

// down takes the worker at addr away: its server stops, and dials fail.
func (nw *network) down(addr string) {
	nw.mu.Lock()
	stop := nw.stops[addr]
	delete(nw.lns, addr)
	delete(nw.stops, addr)
	nw.mu.Unlock()
	stop()
}

func newPoller(t *testing.T, nw *network, cfg Config) *Poller {
	t.Helper()
	cfg.Dial = nw.dial
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t))
	return New(cfg)
}
