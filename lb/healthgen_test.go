package lb

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// /health_generate is answered from one fan-out a second at most: callers
// that arrive while one runs share it, and those within a second of its
// end get its answer. Each call had every worker generate (issue 19), and
// anyone may call it.
func TestHealthGenerateIsShared(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		var ahead atomic.Int64
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		cfg := defaultConfig() // no health checks: the workers' Health counts /health_generate only
		cfg.Now = func() time.Time { return base.Add(time.Duration(ahead.Load())) }
		srv := h.start(cfg)
		workers := []*fake.Server{p, d}
		checks := func(want uint64) {
			t.Helper()
			for _, w := range workers {
				if got := w.Stats().Health; got != want {
					t.Fatalf("a worker was asked /health_generate %d times; want %d", got, want)
				}
			}
		}

		// Concurrent callers: held at the workers until all have arrived.
		for _, w := range workers {
			if err := w.SetFault(fake.Fault{Kind: fake.FaultHang, Health: true}); err != nil {
				t.Fatal(err)
			}
		}
		const callers = 5
		replies := make(chan reply, callers)
		for range callers {
			go func() { replies <- h.do(fasthttp.MethodGet, "/health_generate", "") }()
		}
		waitFor(t, "one fan-out, and the other callers waiting for it", func() bool {
			return p.Stats().Health == 1 && d.Stats().Health == 1 && srv.healthGenerate.waiters() == callers-1
		})
		for _, w := range workers {
			if err := w.SetFault(fake.Fault{}); err != nil {
				t.Fatal(err)
			}
		}
		for range callers {
			if r := <-replies; r.status != fasthttp.StatusOK {
				t.Fatalf("a caller got %d %s; want 200", r.status, r.body)
			}
		}
		checks(1)

		// Sequential callers within the second after it: its answer again.
		for range 3 {
			if r := h.do(fasthttp.MethodGet, "/health_generate", ""); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s; want 200", r.status, r.body)
			}
		}
		ahead.Store(int64(healthGenerateReuse - time.Millisecond))
		if r := h.do(fasthttp.MethodGet, "/health_generate", ""); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s; want 200", r.status, r.body)
		}
		checks(1)

		// Once it is a second old, the workers are asked again, and a failure
		// is shared as well as a success.
		if err := d.SetFault(fake.Fault{Kind: fake.FaultError, Health: true}); err != nil {
			t.Fatal(err)
		}
		ahead.Store(int64(healthGenerateReuse))
		for range 3 {
			if r := h.do(fasthttp.MethodGet, "/health_generate", ""); r.status != fasthttp.StatusServiceUnavailable {
				t.Fatalf("got %d %s; want the decode's failure, 503", r.status, r.body)
			}
		}
		checks(2)
		if got := srv.errorsByReason[reasonBackendFailed].Get(); got != 3 {
			t.Fatalf("got %d backend_failed; want 3, one an answer", got)
		}
	})
}
