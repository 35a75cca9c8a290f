package bootstrap

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"pdlb/bench/fake"
)

// leakOptions ignore goroutines that are not leaks: fasthttp's own
// housekeepers, each of which sleeps out its period before noticing there
// is nothing left to clean; its process-wide Date header clock, started once
// and never stopped; and the timer callbacks of in-memory pipe deadlines,
// which only close a channel and may fire after their connection closed.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreTopFunction("github.com/valyala/fasthttp/fasthttputil.(*pipeDeadline).set.func1"),
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}

// testDeadline bounds every wait, so a broken registry fails a test instead
// of hanging it. It is a failure deadline, never a way to synchronise.
const testDeadline = 10 * time.Second

// The standard prefill: its API, and its bootstrap server on the default
// port of the same host.
const (
	prefillAPI  = "prefill-0:30000"
	prefillBoot = "prefill-0:8998"
)

// clock is a fake clock for the fakes' RegisterDelay and State.Updated.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// startPrefill starts a fake prefill for cfg with its API on addr, and
// closes it at the end of the test (closing it earlier is fine).
func startPrefill(t *testing.T, nw *fake.Network, addr string, cfg fake.Config) *fake.Server {
	t.Helper()
	cfg.Role = fake.RolePrefill
	s := fake.New(cfg)
	if err := s.Start(nw, addr); err != nil {
		t.Fatalf("cannot start prefill %s: %v", addr, err)
	}
	t.Cleanup(func() { closePrefill(t, s) })
	return s
}

func closePrefill(t *testing.T, s *fake.Server) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("cannot close prefill: %v", err)
	}
}

// serveAPI serves h on addr of nw until the end of the test: a prefill API
// that is not a fake.
func serveAPI(t *testing.T, nw *fake.Network, addr string, h fasthttp.RequestHandler) {
	t.Helper()
	ln, err := nw.Listen(addr)
	if err != nil {
		t.Fatalf("cannot listen on %s: %v", addr, err)
	}
	srv := &fasthttp.Server{Handler: h, MaxIdleWorkerDuration: 100 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("cannot shut down %s: %v", addr, err)
		}
		if err := <-done; err != nil {
			t.Errorf("cannot serve %s: %v", addr, err)
		}
	})
}

// newRegistry returns a Registry on nw with short timeouts.
func newRegistry(nw *fake.Network, cfg Config) *Registry {
	cfg.Dial = nw.Dial
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	return NewRegistry(cfg)
}

// testContext is a context that ends at the failure deadline.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

// mustRefresh refreshes target i and fails the test unless it is ready.
func mustRefresh(t *testing.T, r *Registry, i int) *State {
	t.Helper()
	if err := r.Refresh(testContext(t), i); err != nil {
		t.Fatalf("cannot refresh target %d: %v", i, err)
	}
	st := r.State(i)
	if !st.Ready {
		t.Fatalf("target %d is not ready after a successful refresh: %+v", i, st)
	}
	return st
}

// fakeRanks are the ranks a fake prefill with dpSize DP ranks reports when
// its bootstrap server is host:bootPort: rank r on port bootPort+1+r
// (bench/fake's rankPort).
func fakeRanks(host string, bootPort, dpSize int) []Rank {
	ranks := make([]Rank, dpSize)
	for r := range ranks {
		ranks[r] = Rank{DPRank: r, IP: host, Port: bootPort + 1 + r}
	}
	return ranks
}

// fakeInfo is the parallel info a fake prefill reports.
func fakeInfo(dpSize int, legacy bool) Info {
	info := Info{DPSize: dpSize, AttnTPSize: 1, AttnCPSize: 1, PPSize: 1, PageSize: 1, FollowBootstrapRoom: true, Legacy: legacy}
	if !legacy {
		info.KVCacheDType = "auto"
	}
	return info
}
