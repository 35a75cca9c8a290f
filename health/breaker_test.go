package health

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to. It is safe for
// concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestBreaker(threshold int, minBackoff, maxBackoff time.Duration) (*Breaker, *fakeClock) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return NewBreaker(BreakerConfig{
		Threshold: threshold, MinBackoff: minBackoff, MaxBackoff: maxBackoff, Now: clk.now,
	}), clk
}

func wantBreaker(t *testing.T, b *Breaker, state BreakerState, allow bool) {
	t.Helper()
	if got := b.State(); got != state {
		t.Errorf("State got %q; want %q", got, state)
	}
	if got := b.Allow(); got != allow {
		t.Errorf("Allow in %s got %t; want %t", state, got, allow)
	}
}

func TestBreakerStateString(t *testing.T) {
	f := func(s BreakerState, want string) {
		t.Helper()
		if got := s.String(); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f(Closed, "closed")
	f(Open, "open")
	f(HalfOpen, "half-open")
	f(BreakerState(9), "BreakerState(9)")
}

func TestBreakerOpensAtThreshold(t *testing.T) {
	b, _ := newTestBreaker(3, time.Second, 30*time.Second)
	for i := range 2 {
		if b.Failure() {
			t.Fatalf("failure %d opened the breaker; want it to open at 3", i+1)
		}
		wantBreaker(t, b, Closed, true)
	}
	if !b.Failure() {
		t.Fatalf("failure 3 did not report opening the breaker")
	}
	wantBreaker(t, b, Open, false)
	// Late failures of requests admitted before it opened change nothing.
	if b.Failure() {
		t.Errorf("a failure while open reported opening it again")
	}
	if got := b.Ejections(); got != 1 {
		t.Errorf("Ejections got %d; want 1", got)
	}
}

func TestBreakerSuccessResetsCount(t *testing.T) {
	b, _ := newTestBreaker(3, time.Second, 30*time.Second)
	b.Failure()
	b.Failure()
	b.Success()
	b.Failure()
	if b.Failure() {
		t.Fatalf("2 failures after a success opened the breaker; want 3")
	}
	wantBreaker(t, b, Closed, true)
}

func TestBreakerBackoff(t *testing.T) {
	b, clk := newTestBreaker(1, time.Second, 5*time.Second)
	b.Failure()
	// Each failed trial doubles the backoff, up to MaxBackoff.
	for i, backoff := range []time.Duration{1, 2, 4, 5, 5} {
		backoff *= time.Second
		clk.advance(backoff - 1)
		wantBreaker(t, b, Open, false)
		clk.advance(1)
		wantBreaker(t, b, HalfOpen, true)
		if i == 4 {
			break
		}
		if !b.Failure() {
			t.Fatalf("ejection %d: a half-open failure did not report re-opening", i+1)
		}
	}
	if got := b.Ejections(); got != 5 {
		t.Errorf("Ejections got %d; want 5", got)
	}
}

func TestBreakerSuccessCloses(t *testing.T) {
	tests := []struct {
		name string
		// before brings the breaker to the state that Success must close.
		before func(b *Breaker, clk *fakeClock)
	}{
		{"half-open", func(b *Breaker, clk *fakeClock) {
			b.Failure()
			clk.advance(time.Second)
			b.Failure() // re-opened for 2 s
			clk.advance(2 * time.Second)
		}},
		{"open", func(b *Breaker, clk *fakeClock) {
			b.Failure()
			b.Failure()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, clk := newTestBreaker(2, time.Second, 30*time.Second)
			tt.before(b, clk)
			b.Success()
			wantBreaker(t, b, Closed, true)
			// Closing forgets the count and the backoff: it takes
			// Threshold failures to open again, for MinBackoff.
			if b.Failure() {
				t.Fatalf("the first failure after closing opened the breaker")
			}
			if !b.Failure() {
				t.Fatalf("Threshold failures after closing did not open the breaker")
			}
			clk.advance(time.Second - 1)
			wantBreaker(t, b, Open, false)
			clk.advance(1)
			wantBreaker(t, b, HalfOpen, true)
		})
	}
}

func TestNewBreakerDefaults(t *testing.T) {
	clk := &fakeClock{}
	b := NewBreaker(BreakerConfig{Now: clk.now})
	for i := range 4 {
		if b.Failure() {
			t.Fatalf("failure %d opened the breaker; want the default threshold 5", i+1)
		}
	}
	if !b.Failure() {
		t.Fatalf("failure 5 did not open the breaker")
	}
	clk.advance(time.Second - 1)
	wantBreaker(t, b, Open, false)
	for range 10 { // 1 s doubled 10 times is past the 30 s cap
		clk.advance(time.Hour)
		b.Failure()
	}
	clk.advance(30*time.Second - 1)
	wantBreaker(t, b, Open, false)
	clk.advance(1)
	wantBreaker(t, b, HalfOpen, true)

	// A MaxBackoff below MinBackoff is raised to it.
	b, clk = newTestBreaker(1, 10*time.Second, time.Second)
	b.Failure()
	clk.advance(10 * time.Second)
	b.Failure()
	clk.advance(10*time.Second - 1)
	wantBreaker(t, b, Open, false)
	clk.advance(1)
	wantBreaker(t, b, HalfOpen, true)
}

// TestBreakerConcurrentFailures checks that exactly one of many concurrent
// failures reports each opening, over enough rounds for the racers to
// interleave.
func TestBreakerConcurrentFailures(t *testing.T) {
	const n, rounds = 16, 200
	b, clk := newTestBreaker(2, time.Second, 30*time.Second)
	race := func() (openers int) {
		var (
			wg     sync.WaitGroup
			count  atomic.Int32
			starts = make(chan struct{})
		)
		for range n {
			wg.Go(func() {
				<-starts
				if b.Failure() {
					count.Add(1)
				}
			})
		}
		close(starts)
		wg.Wait()
		return int(count.Load())
	}
	for i := range rounds {
		b.Success()
		if got := race(); got != 1 {
			t.Fatalf("round %d, closed: %d failures reported opening; want 1", i, got)
		}
		clk.advance(time.Hour)
		if got := race(); got != 1 {
			t.Fatalf("round %d, half-open: %d failures reported re-opening; want 1", i, got)
		}
	}
	if got := b.Ejections(); got != 2*rounds {
		t.Errorf("Ejections got %d; want %d", got, 2*rounds)
	}
	wantBreaker(t, b, Open, false)
}

// TestBreakerConcurrentMix hammers a breaker from many goroutines (run it
// with -race); whatever the interleaving, a success must then close it.
func TestBreakerConcurrentMix(t *testing.T) {
	b, clk := newTestBreaker(3, time.Millisecond, 8*time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				switch (g + i) % 5 {
				case 0:
					b.Success()
				case 1:
					clk.advance(time.Millisecond)
				default:
					b.Failure()
				}
				b.Allow()
				if s := b.State(); s != Closed && s != Open && s != HalfOpen {
					t.Errorf("State got %q", s)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Ejections() == 0 {
		t.Errorf("Ejections got 0; want some")
	}
	b.Success()
	wantBreaker(t, b, Closed, true)
}

func TestBreakerAllowDoesNotAllocate(t *testing.T) {
	b, clk := newTestBreaker(1, time.Second, 30*time.Second)
	f := func(state BreakerState) {
		t.Helper()
		if got := testing.AllocsPerRun(100, func() { b.Allow() }); got != 0 {
			t.Errorf("Allow in %s: got %v allocations; want 0", state, got)
		}
	}
	f(Closed)
	b.Failure()
	f(Open)
	clk.advance(time.Second)
	f(HalfOpen)
}
