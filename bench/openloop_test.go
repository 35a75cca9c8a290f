package bench

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestArrivals checks the gaps of the Poisson process over many draws: an
// exponential law has its mean, 1/rate, as standard deviation too.
func TestArrivals(t *testing.T) {
	const (
		rate = 250.0
		n    = 200000
	)
	a := newArrivals(rate, 1)
	var sum, sq float64
	for range n {
		g := a.next().Seconds()
		if g < 0 {
			t.Fatalf("got a negative gap %v", g)
		}
		sum += g
		sq += g * g
	}
	mean := sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	if want := 1 / rate; math.Abs(mean-want) > 0.01*want || math.Abs(sd-want) > 0.02*want {
		t.Fatalf("got mean gap %.6fs, sd %.6fs; want both %.6fs", mean, sd, want)
	}
}

// A tiny rate's gaps are huge, never negative: 1e-12 requests/s made
// gaps past a Duration's range, which overflowed into negative ones and
// sent every arrival at once.
func TestArrivalsAtATinyRate(t *testing.T) {
	a := newArrivals(1e-12, 1)
	for range 1000 {
		if g := a.next(); g < time.Hour {
			t.Fatalf("got a gap of %v at 1e-12 requests/s", g)
		}
	}
}

func TestArrivalsSeeded(t *testing.T) {
	gaps := func(seed uint64) []time.Duration {
		a := newArrivals(100, seed)
		gs := make([]time.Duration, 100)
		for i := range gs {
			gs[i] = a.next()
		}
		return gs
	}
	if a, b := gaps(9), gaps(9); !slices.Equal(a, b) {
		t.Fatalf("got %v then %v with seed 9; want the same gaps", a[:3], b[:3])
	}
	if a, b := gaps(9), gaps(10); slices.Equal(a, b) {
		t.Fatalf("got %v with seeds 9 and 10; want different gaps", a[:3])
	}
}

// arrivalsWithin counts the arrivals the open loop schedules in the first d
// of a run at rate with seed.
func arrivalsWithin(rate float64, seed uint64, d time.Duration) int {
	a := newArrivals(rate, seed)
	n := 0
	for at := a.next(); at < d; at += a.next() {
		n++
	}
	return n
}

// TestRunOpenLoop checks that the open loop sends one request per arrival
// of its schedule: about rate × duration, and exactly the number of the
// seed's arrivals inside the window, however late the generator ran.
func TestRunOpenLoop(t *testing.T) {
	// Not in parallel: it counts every arrival of a short window, and a
	// generator starved past maxOverrun ends the round early.
	const (
		rate = 2000.0
		d    = 100 * time.Millisecond
		seed = 5
	)
	want := arrivalsWithin(rate, seed, d)
	if want < 140 || want > 260 {
		t.Fatalf("got %d arrivals in %v at %v/s; want about %v", want, d, rate, rate*d.Seconds())
	}
	rc := &recorder{}
	cfg := serve(t, jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`))
	cfg.Rate = rate
	cfg.Duration = d
	cfg.Seed = seed
	rep := run(t, cfg)

	checkCounts(t, rep, want, want)
	if got := rc.count(); got != want {
		t.Fatalf("endpoint got %d requests; want %d", got, want)
	}
	if rep.Rate != rate || rep.Concurrency != 0 || rep.MaxInflight != defaultMaxInflight {
		t.Fatalf("got rate %v, concurrency %d, max inflight %d; want %v, 0, %d",
			rep.Rate, rep.Concurrency, rep.MaxInflight, rate, defaultMaxInflight)
	}
}

func TestRunOpenLoopRequests(t *testing.T) {
	rc := &recorder{}
	cfg := serve(t, jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`))
	cfg.Rate = 1e5
	cfg.Requests = 30
	rep := run(t, cfg)
	checkCounts(t, rep, 30, 30)
	if got := rc.count(); got != 30 {
		t.Fatalf("endpoint got %d requests; want 30", got)
	}
}

// TestRunOpenLoopDropped holds the first request well past the end of
// the window with room for one request in flight: every later arrival is
// dropped, and counted as such.
func TestRunOpenLoopDropped(t *testing.T) {
	// Not in parallel: it counts every arrival of a short window, and a
	// generator starved past maxOverrun ends the round early.
	const (
		rate = 1000.0
		d    = 50 * time.Millisecond
		seed = 3
	)
	want := arrivalsWithin(rate, seed, d)
	rc := &recorder{}
	h := jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		pause(d + 250*time.Millisecond) // the slow answer being measured
		h(ctx)
	})
	cfg.Rate = rate
	cfg.Duration = d
	cfg.Seed = seed
	cfg.MaxInflight = 1
	rep := run(t, cfg)

	checkCounts(t, rep, want, 1)
	if got := rep.Errors[KindDropped]; got != want-1 || len(rep.Errors) != 1 {
		t.Fatalf("got errors %v; want %s: %d", rep.Errors, KindDropped, want-1)
	}
	if got := rc.count(); got != 1 {
		t.Fatalf("endpoint got %d requests; want 1", got)
	}
}

func TestPool(t *testing.T) {
	made := 0
	p := pool{max: 2, free: make(chan *worker, 2), new: func() *worker { made++; return &worker{} }}
	a, b := p.get(), p.get()
	if a == nil || b == nil || a == b {
		t.Fatalf("got workers %p and %p; want two", a, b)
	}
	if w := p.get(); w != nil {
		t.Fatalf("got a third worker with max 2; want none")
	}
	p.put(b)
	if w := p.get(); w != b {
		t.Fatalf("got %p after putting %p back; want it again", w, b)
	}
	if made != 2 || len(p.all) != 2 {
		t.Fatalf("got %d workers made, %d kept; want 2 and 2", made, len(p.all))
	}
}

// TestRunOpenLoopTooFast asks for a rate whose gaps round to 0 ns: the
// schedule then never reaches the end of the window, and the run once went
// on forever. The clock must end it.
func TestRunOpenLoopTooFast(t *testing.T) {
	t.Parallel()
	cfg := serve(t, jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`))
	cfg.Rate = 1e10
	cfg.Duration = 50 * time.Millisecond
	cfg.MaxInflight = 2
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := runAsync(t, ctx, cfg)
	select {
	case rep := <-done:
		if rep.Interrupted || rep.Requests == 0 {
			t.Fatalf("got %d requests, interrupted %v; want some, a complete run", rep.Requests, rep.Interrupted)
		}
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatal("the run did not end with its duration")
	}
}

// TestRunOpenLoopElapsedCoversTheWindow draws a schedule whose one arrival
// in a 500 ms window comes at 192 ms, answered at once. Elapsed once ended
// with that answer, so the rate counted the window's arrivals over part of
// it; it must run to the window's end, as bench_serving's does to the end
// of its last request.
func TestRunOpenLoopElapsedCoversTheWindow(t *testing.T) {
	t.Parallel()
	const (
		rate = 10.0
		d    = 500 * time.Millisecond
		seed = 3
	)
	if n, first := arrivalsWithin(rate, seed, d), newArrivals(rate, seed).next(); n != 1 || first > d/2 {
		t.Fatalf("got %d arrivals, the first at %v; want one, in the first half of the %v window", n, first, d)
	}
	cfg := serve(t, jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`))
	cfg.Rate = rate
	cfg.Duration = d
	cfg.Seed = seed
	start := time.Now()
	rep := run(t, cfg)

	checkCounts(t, rep, 1, 1)
	if rep.Elapsed < d || rep.RequestsPerSec != 1/rep.Elapsed.Seconds() {
		t.Fatalf("got elapsed %v, %v req/s; want at least the %v window, 1 request over it", rep.Elapsed, rep.RequestsPerSec, d)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("the run took %v; want the %v window at least, as its elapsed says", took, d)
	}
}

// TestRunOpenLoopElapsedInterrupted cuts an open loop whose requests all
// hang: its measured time runs to the cut, as arrivals went on until then.
// It was zero, no request having ended.
func TestRunOpenLoopElapsedInterrupted(t *testing.T) {
	const (
		rate = 10.0
		seed = 2
	)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	hanging := make(chan struct{}, 1)
	cfg := serve(t, func(*fasthttp.RequestCtx) {
		select {
		case hanging <- struct{}{}:
		default:
		}
		<-hang
	})
	cfg.Rate = rate
	cfg.Seed = seed
	cfg.Duration = time.Minute
	before := time.Now()
	rep := runUntil(t, cfg, hanging, "a request reaching the endpoint")
	// The first arrival was sent no earlier than due, and reached the
	// endpoint before the cut.
	first := newArrivals(rate, seed).next()
	if !rep.Interrupted || rep.Requests != 0 || rep.Elapsed < first || rep.Elapsed > time.Since(before) {
		t.Fatalf("got %d requests, interrupted %v, elapsed %v; want none, interrupted, from %v (the first arrival) to %v",
			rep.Requests, rep.Interrupted, rep.Elapsed, first, time.Since(before))
	}
}
