package health

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// deadline bounds every wait of these tests; reaching it is a failure.
const deadline = 5 * time.Second

// network maps addresses to in-memory listeners. Fill it before the
// Checker that dials through it starts probing.
type network map[string]*fasthttputil.InmemoryListener

func (nw network) dial(addr string) (net.Conn, error) {
	ln, ok := nw[addr]
	if !ok {
		return nil, fmt.Errorf("no route to %s", addr)
	}
	return ln.Dial()
}

// serve runs h on addr until the end of the test. Handlers that block must
// give up when a channel closed by a later t.Cleanup is closed, since
// cleanups run last-in first-out and this one waits for them.
func (nw network) serve(t *testing.T, addr string, h fasthttp.RequestHandler) {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	nw[addr] = ln
	// The server's complaints about connections the client dropped would
	// only be noise here.
	quiet := zerolog.Nop()
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, Logger: &quiet}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Shutdown()
		_ = ln.Close() // in case Serve had not started when Shutdown ran
		<-done
	})
}

// backend is a fake worker whose probes get status.
type backend struct {
	status atomic.Int32
	path   atomic.Pointer[string]
}

func (nw network) backend(t *testing.T, addr string) *backend {
	t.Helper()
	b := &backend{}
	b.status.Store(fasthttp.StatusOK)
	nw.serve(t, addr, func(ctx *fasthttp.RequestCtx) {
		p := string(ctx.Path())
		b.path.Store(&p)
		ctx.SetStatusCode(int(b.status.Load()))
	})
	return b
}

// hang serves addr with a handler that signals entered and then blocks
// until the end of the test.
func (nw network) hang(t *testing.T, addr string) (entered <-chan struct{}) {
	t.Helper()
	in := make(chan struct{}, 1)
	release := make(chan struct{})
	nw.serve(t, addr, func(*fasthttp.RequestCtx) {
		select {
		case in <- struct{}{}:
		default:
		}
		<-release
	})
	t.Cleanup(func() { close(release) })
	return in
}

func newChecker(t *testing.T, nw network, cfg Config, targets ...Target) *Checker {
	t.Helper()
	if nw != nil {
		cfg.Dial = nw.dial
	}
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t))
	return NewChecker(cfg, targets)
}

// record returns an OnChange that sends to the returned channel.
func record() (func(State), chan State) {
	ch := make(chan State, 64)
	return func(s State) { ch <- s }, ch
}

// drain returns the states received so far.
func drain(ch chan State) []State {
	var got []State
	for {
		select {
		case s := <-ch:
			got = append(got, s)
		default:
			return got
		}
	}
}

// checkOnce runs one round and fails the test if it does not end in time.
func checkOnce(t *testing.T, ctx context.Context, c *Checker) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.CheckOnce(ctx)
	}()
	wait(t, done, "CheckOnce")
}

func wait(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%s did not return within %s", what, deadline)
	}
}

func wantChange(t *testing.T, ch <-chan State, want State) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("OnChange got %q; want %q", got, want)
		}
	case <-time.After(deadline):
		t.Fatalf("OnChange(%q) not called within %s", want, deadline)
	}
}

func TestStateString(t *testing.T) {
	f := func(s State, want string) {
		t.Helper()
		if got := s.String(); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f(Unknown, "unknown")
	f(Up, "up")
	f(Down, "down")
	f(State(7), "State(7)")
}

func TestStep(t *testing.T) {
	const rise, fall = 2, 3
	f := func(s State, streak int, ok bool, wantState State, wantStreak int) {
		t.Helper()
		got, gotStreak := step(s, streak, ok, rise, fall)
		if got != wantState || gotStreak != wantStreak {
			t.Errorf("step(%s, %d, %t) got (%s, %d); want (%s, %d)",
				s, streak, ok, got, gotStreak, wantState, wantStreak)
		}
	}
	// The first result decides, whatever the thresholds.
	f(Unknown, 0, true, Up, 0)
	f(Unknown, 0, false, Down, 0)
	// Results that agree with the state reset the streak.
	f(Up, 2, true, Up, 0)
	f(Down, 1, false, Down, 0)
	// Up falls at the fall-th failure.
	f(Up, 0, false, Up, 1)
	f(Up, 1, false, Up, 2)
	f(Up, 2, false, Down, 0)
	// Down rises at the rise-th success.
	f(Down, 0, true, Down, 1)
	f(Down, 1, true, Up, 0)
}

func TestCheckerRiseFall(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	onChange, changes := record()
	c := newChecker(t, nw, Config{Rise: 2, Fall: 3}, Target{Name: "w", Addr: "worker:1", OnChange: onChange})
	if got := c.State(0); got != Unknown {
		t.Fatalf("state before any probe: got %q; want %q", got, Unknown)
	}
	steps := []struct {
		status int
		want   State
		change bool
	}{
		{200, Up, true}, // from Unknown the first success is enough
		{503, Up, false},
		{503, Up, false},
		{503, Down, true}, // third failure: Fall
		{200, Down, false},
		{503, Down, false}, // a failure resets the rise streak
		{200, Down, false},
		{200, Up, true}, // second success in a row: Rise
		{503, Up, false},
		{503, Up, false},
		{200, Up, false}, // a success resets the fall streak
		{503, Up, false},
		{503, Up, false},
		{503, Down, true},
	}
	for i, s := range steps {
		b.status.Store(int32(s.status))
		checkOnce(t, context.Background(), c)
		if got := c.State(0); got != s.want {
			t.Fatalf("step %d (status %d): got %q; want %q", i, s.status, got, s.want)
		}
		got := fmt.Sprint(drain(changes))
		want := "[]"
		if s.change {
			want = fmt.Sprint([]State{s.want})
		}
		if got != want {
			t.Fatalf("step %d (status %d): OnChange calls got %s; want %s", i, s.status, got, want)
		}
		wantErr := ""
		if s.status != 200 {
			wantErr = "GET /health returned status 503; want 200"
		}
		if got := c.LastError(0); got != wantErr {
			t.Fatalf("step %d: LastError got %q; want %q", i, got, wantErr)
		}
	}
	ok, failed := c.Probes()
	if ok != 5 || failed != 9 {
		t.Errorf("Probes got (%d, %d); want (5, 9)", ok, failed)
	}
	if got := *b.path.Load(); got != "/health" {
		t.Errorf("probed path got %q; want %q", got, "/health")
	}
}

func TestCheckerFirstFailureIsDown(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	b.status.Store(fasthttp.StatusServiceUnavailable)
	onChange, changes := record()
	c := newChecker(t, nw, Config{Fall: 3}, Target{Addr: "worker:1", Path: "/ready", OnChange: onChange})
	checkOnce(t, context.Background(), c)
	if got := c.State(0); got != Down {
		t.Fatalf("got %q; want %q", got, Down)
	}
	if got, want := fmt.Sprint(drain(changes)), "[down]"; got != want {
		t.Errorf("OnChange calls got %s; want %s", got, want)
	}
	if got := *b.path.Load(); got != "/ready" {
		t.Errorf("probed path got %q; want %q", got, "/ready")
	}
}

func TestCheckerFailures(t *testing.T) {
	t.Parallel()
	closedLn := fasthttputil.NewInmemoryListener()
	_ = closedLn.Close()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot listen: %s", err)
	}
	refusedAddr := refused.Addr().String()
	_ = refused.Close()

	tests := []struct {
		name    string
		addr    string
		tcp     bool // probe over real TCP rather than the in-memory network
		wantErr string
	}{
		{name: "hanging handler times out", addr: "hang:1", wantErr: "cannot GET /health: fasthttp: timeout"},
		{name: "closed listener", addr: "closed:1", wantErr: "cannot GET /health: fasthttputil: inmemorylistener is already closed"},
		{name: "no route", addr: "nowhere:1", wantErr: "cannot GET /health: no route to nowhere:1"},
		{name: "connection refused", addr: refusedAddr, tcp: true, wantErr: "cannot GET /health: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nw := network{"closed:1": closedLn}
			nw.hang(t, "hang:1")
			if tt.tcp {
				nw = nil
			}
			onChange, changes := record()
			c := newChecker(t, nw, Config{Timeout: 100 * time.Millisecond},
				Target{Addr: tt.addr, OnChange: onChange})
			checkOnce(t, context.Background(), c)
			if got := c.State(0); got != Down {
				t.Errorf("got %q; want %q", got, Down)
			}
			if got := c.LastError(0); !strings.HasPrefix(got, tt.wantErr) {
				t.Errorf("LastError got %q; want prefix %q", got, tt.wantErr)
			}
			if got, want := fmt.Sprint(drain(changes)), "[down]"; got != want {
				t.Errorf("OnChange calls got %s; want %s", got, want)
			}
			if ok, failed := c.Probes(); ok != 0 || failed != 1 {
				t.Errorf("Probes got (%d, %d); want (0, 1)", ok, failed)
			}
		})
	}
}

// TestCheckOnceProbesConcurrently makes each target's handler wait for the
// other's request: probed one after the other, the first would time out.
func TestCheckOnceProbesConcurrently(t *testing.T) {
	t.Parallel()
	nw := network{}
	aIn, bIn := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	rendezvous := func(mine, other chan struct{}) fasthttp.RequestHandler {
		var once sync.Once
		return func(*fasthttp.RequestCtx) {
			once.Do(func() { close(mine) })
			select {
			case <-other:
			case <-release:
			}
		}
	}
	nw.serve(t, "a:1", rendezvous(aIn, bIn))
	nw.serve(t, "b:1", rendezvous(bIn, aIn))
	t.Cleanup(func() { close(release) })
	c := newChecker(t, nw, Config{Timeout: 2 * time.Second}, Target{Addr: "a:1"}, Target{Addr: "b:1"})
	checkOnce(t, context.Background(), c)
	for i := range 2 {
		if got := c.State(i); got != Up {
			t.Errorf("target %d: got %q; want %q (%s)", i, got, Up, c.LastError(i))
		}
	}
}

func TestCheckOnceContext(t *testing.T) {
	t.Parallel()
	t.Run("cancelled before", func(t *testing.T) {
		nw := network{}
		nw.backend(t, "worker:1")
		c := newChecker(t, nw, Config{}, Target{Addr: "worker:1"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		checkOnce(t, ctx, c)
		if ok, failed := c.Probes(); ok != 0 || failed != 0 {
			t.Errorf("Probes got (%d, %d); want (0, 0)", ok, failed)
		}
	})
	t.Run("deadline before timeout", func(t *testing.T) {
		nw := network{}
		nw.hang(t, "hang:1")
		onChange, changes := record()
		// Only ctx can end this probe within the test's deadline.
		c := newChecker(t, nw, Config{Timeout: time.Hour}, Target{Addr: "hang:1", OnChange: onChange})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		checkOnce(t, ctx, c)
		// The caller's deadline says nothing about the target.
		if got := c.State(0); got != Unknown {
			t.Errorf("got %q; want %q", got, Unknown)
		}
		if got := drain(changes); len(got) != 0 {
			t.Errorf("OnChange calls got %v; want none", got)
		}
		if ok, failed := c.Probes(); ok != 0 || failed != 0 {
			t.Errorf("Probes got (%d, %d); want (0, 0)", ok, failed)
		}
	})
}

// TestCheckOnceConcurrentCalls checks that overlapping CheckOnce calls
// still report each transition once and in order (run it with -race).
func TestCheckOnceConcurrentCalls(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	var (
		mu  sync.Mutex
		got []State
	)
	c := newChecker(t, nw, Config{Rise: 1, Fall: 1}, Target{Addr: "worker:1", OnChange: func(s State) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				if (g+i)%2 == 0 {
					b.status.Store(fasthttp.StatusOK)
				} else {
					b.status.Store(fasthttp.StatusInternalServerError)
				}
				c.CheckOnce(context.Background())
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	wait(t, done, "concurrent CheckOnce calls")
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("OnChange calls %v: %q twice in a row", got, got[i])
		}
	}
	if len(got) == 0 || got[len(got)-1] != c.State(0) {
		t.Errorf("OnChange calls %v; want them to end with State %q", got, c.State(0))
	}
}

func TestCheckerRun(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	onChange, changes := record()
	c := newChecker(t, nw, Config{Fall: 2}, Target{Addr: "worker:1", OnChange: onChange})
	tick := make(chan time.Time)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(stop, tick)
	}()
	wantChange(t, changes, Up) // the first round needs no tick

	b.status.Store(fasthttp.StatusServiceUnavailable)
	for range 2 {
		// A send returns once the previous round has finished.
		select {
		case tick <- time.Time{}:
		case <-time.After(deadline):
			t.Fatalf("run did not take a tick within %s", deadline)
		}
	}
	wantChange(t, changes, Down)
	close(stop)
	wait(t, done, "run")
	if got := drain(changes); len(got) != 0 {
		t.Errorf("more OnChange calls: %v", got)
	}
}

func TestRunStops(t *testing.T) {
	t.Parallel()
	t.Run("between rounds", func(t *testing.T) {
		nw := network{}
		nw.backend(t, "worker:1")
		onChange, changes := record()
		c := newChecker(t, nw, Config{Interval: time.Hour}, Target{Addr: "worker:1", OnChange: onChange})
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(stop)
		}()
		wantChange(t, changes, Up)
		close(stop)
		wait(t, done, "Run")
	})
	t.Run("during a probe", func(t *testing.T) {
		nw := network{}
		entered := nw.hang(t, "hang:1")
		onChange, changes := record()
		c := newChecker(t, nw, Config{Timeout: 100 * time.Millisecond}, Target{Addr: "hang:1", OnChange: onChange})
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(stop)
		}()
		wait(t, entered, "the first probe")
		close(stop)
		wait(t, done, "Run")
		// Stopping is no failure of the target.
		if got := c.State(0); got != Unknown {
			t.Errorf("got %q; want %q", got, Unknown)
		}
		if got := drain(changes); len(got) != 0 {
			t.Errorf("OnChange calls got %v; want none", got)
		}
	})
}

func TestCheckerLogsTransitionsOnly(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	var buf bytes.Buffer
	c := NewChecker(Config{
		Rise: 1, Fall: 2, Dial: nw.dial,
		Log: zerolog.New(zerolog.SyncWriter(&buf)).Level(zerolog.InfoLevel),
	}, []Target{{Name: "decode worker:1", Addr: "worker:1"}})
	for _, status := range []int32{200, 503, 503, 503, 503, 200, 200} {
		b.status.Store(status)
		checkOnce(t, context.Background(), c)
	}
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`{"level":"info","component":"health","target":"decode worker:1","addr":"worker:1","from":"unknown","message":"backend is up"}`,
		`{"level":"warn","component":"health","target":"decode worker:1","addr":"worker:1","from":"up","error":"GET /health returned status 503; want 200","message":"backend is down"}`,
		`{"level":"info","component":"health","target":"decode worker:1","addr":"worker:1","from":"down","message":"backend is up"}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNewChecker(t *testing.T) {
	c := NewChecker(Config{}, []Target{{Addr: "a:1"}, {Addr: "b:2", Path: "/ready", TLS: true}})
	if c.cfg.Interval != 5*time.Second || c.cfg.Timeout != 2*time.Second || c.cfg.Rise != 2 || c.cfg.Fall != 3 {
		t.Errorf("defaults got %+v; want interval 5s, timeout 2s, rise 2, fall 3", c.cfg)
	}
	f := func(i int, wantURI string) {
		t.Helper()
		tg := (*c.targets.Load())[i]
		if tg.uri != wantURI {
			t.Errorf("uri got %q; want %q", tg.uri, wantURI)
		}
		hc := tg.hc
		if hc.MaxConns != 2 || hc.MaxIdemponentCallAttempts != 1 ||
			hc.ReadTimeout != c.cfg.Timeout || hc.WriteTimeout != c.cfg.Timeout ||
			hc.MaxIdleConnDuration <= 0 || hc.MaxIdleConnDuration >= 5*time.Second {
			t.Errorf("probe client of %s is not small, single-attempt and bounded", wantURI)
		}
		if got := c.State(i); got != Unknown {
			t.Errorf("got %q; want %q", got, Unknown)
		}
		if got := c.LastError(i); got != "" {
			t.Errorf("LastError got %q; want %q", got, "")
		}
	}
	f(0, "http://a:1/health")
	f(1, "https://b:2/ready")
}

// OnProbe hears of every counted probe, also of failures under the Fall
// threshold, which change no state: a worker that restarts between the
// rounds that would take it down shows only those (issue 20). A probe
// pdlb lacked the descriptors for says nothing of the worker and is not
// reported.
func TestOnProbeReportsFailuresUnderTheThreshold(t *testing.T) {
	t.Parallel()
	nw := network{}
	b := nw.backend(t, "worker:1")
	var starved atomic.Bool
	probes := make(chan error, 64)
	onChange, changes := record()
	c := newChecker(t, nil, Config{Rise: 2, Fall: 3, Dial: func(addr string) (net.Conn, error) {
		if starved.Load() {
			return nil, dialError(syscall.EMFILE)
		}
		return nw.dial(addr)
	}}, Target{Addr: "worker:1", OnChange: onChange, OnProbe: func(err error) { probes <- err }})
	steps := []struct {
		status  int
		starved bool
		want    string // the reported error; "-" for no report
	}{
		{status: 200, want: ""},
		{status: 503, want: "GET /health returned status 503; want 200"},
		{status: 503, starved: true, want: "-"},
		{status: 503, want: "GET /health returned status 503; want 200"},
		{status: 200, want: ""},
	}
	for i, s := range steps {
		b.status.Store(int32(s.status))
		starved.Store(s.starved)
		(*c.targets.Load())[0].hc.CloseIdleConnections() // so that each probe dials
		checkOnce(t, context.Background(), c)
		var got []string
		for _, err := range drainErrors(probes) {
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			got = append(got, msg)
		}
		want := []string{s.want}
		if s.want == "-" {
			want = nil
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: OnProbe got %q; want %q", i, got, want)
		}
		if got := c.State(0); got != Up {
			t.Fatalf("step %d: got %q; want %q: two failures are under Fall", i, got, Up)
		}
	}
	if got, want := fmt.Sprint(drain(changes)), "[up]"; got != want {
		t.Errorf("OnChange calls got %s; want %s", got, want)
	}
}

// drainErrors returns the errors received so far.
func drainErrors(ch chan error) []error {
	var got []error
	for {
		select {
		case err := <-ch:
			got = append(got, err)
		default:
			return got
		}
	}
}
