package health

import (
	"strconv"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Breaker.
type BreakerState int32

const (
	// Closed lets every request through and counts consecutive failures.
	Closed BreakerState = iota
	// Open rejects requests until its backoff has elapsed.
	Open
	// HalfOpen is Open with its backoff elapsed: requests pass as trials,
	// and the first outcome reported closes or re-opens the breaker.
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// Defaults for the zero fields of BreakerConfig.
const (
	defaultThreshold  = 5
	defaultMinBackoff = time.Second
	defaultMaxBackoff = 30 * time.Second
)

// BreakerConfig tunes a Breaker. The zero value opens after 5 consecutive
// failures for 1 s, doubling up to 30 s, on the wall clock.
type BreakerConfig struct {
	// Threshold is how many consecutive failures open a closed breaker;
	// 0 means 5.
	Threshold int
	// MinBackoff is how long the breaker stays open the first time; 0
	// means 1 s.
	MinBackoff time.Duration
	// MaxBackoff caps the doubled backoff; 0 means 30 s. A value below
	// MinBackoff is raised to it.
	MaxBackoff time.Duration
	// Now returns the current time; nil means time.Now. Tests set a fake
	// clock. It must be safe for concurrent use.
	Now func() time.Time
}

// Breaker is a circuit breaker for one backend, fed with the outcomes of
// real requests (passive health checking, after Envoy's outlier detection).
// It is lock-free and safe for concurrent use: any number of goroutines may
// call Allow, Success and Failure at once. The deadline and backoff of an
// open breaker change together by compare-and-swap, so races always leave a
// consistent state, and exactly one of several concurrent failures reports
// that it opened or re-opened the breaker. A success racing the failure that
// reaches Threshold may leave the breaker open or closed; either is sane,
// and the next outcome settles it. A Breaker must not be copied. The zero
// value is not usable; use NewBreaker.
type Breaker struct {
	threshold  int64
	minBackoff time.Duration
	maxBackoff time.Duration
	now        func() time.Time

	// ejection is nil while the breaker is closed. It is replaced, never
	// modified, so that a single CompareAndSwap moves the deadline and the
	// backoff together.
	ejection atomic.Pointer[ejection]
	// failures counts consecutive failures while closed.
	failures  atomic.Int64
	ejections atomic.Uint64
}

// ejection is one period during which a Breaker is open.
type ejection struct {
	until   time.Time
	backoff time.Duration
}

// NewBreaker returns a closed Breaker configured by cfg.
func NewBreaker(cfg BreakerConfig) *Breaker {
	b := &Breaker{
		threshold:  int64(cfg.Threshold),
		minBackoff: cfg.MinBackoff,
		maxBackoff: cfg.MaxBackoff,
		now:        cfg.Now,
	}
	if b.threshold <= 0 {
		b.threshold = defaultThreshold
	}
	if b.minBackoff <= 0 {
		b.minBackoff = defaultMinBackoff
	}
	if b.maxBackoff <= 0 {
		b.maxBackoff = defaultMaxBackoff
	}
	b.maxBackoff = max(b.maxBackoff, b.minBackoff)
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// Allow reports whether a request may go to the backend: true while the
// breaker is closed or half-open, false while it is open. It is meant for
// every pick: while closed it is a single atomic load, and it never
// allocates.
func (b *Breaker) Allow() bool {
	e := b.ejection.Load()
	return e == nil || !b.now().Before(e.until)
}

// Success reports a request that the backend served. It closes the
// breaker, forgetting the failures counted and the backoff reached. This
// holds even while the breaker is open, for a request admitted before it
// opened: a backend that serves is not to be ejected.
func (b *Breaker) Success() {
	// Loads first: Success runs on every request, and stores to shared
	// cache lines are what would make it costly.
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.ejection.Load() != nil {
		b.ejection.Store(nil)
	}
}

// Failure reports a request that the backend failed, and whether this call
// opened the breaker, so that the caller logs the ejection once. A closed
// breaker opens for MinBackoff at its Threshold-th consecutive failure. A
// half-open breaker re-opens at once, for twice its last backoff capped at
// MaxBackoff. While open, failures are ignored: they come from requests
// admitted before it opened.
func (b *Breaker) Failure() (opened bool) {
	for {
		e := b.ejection.Load()
		if e == nil {
			return b.countFailure()
		}
		now := b.now()
		if now.Before(e.until) {
			return false
		}
		next := &ejection{backoff: b.double(e.backoff)}
		next.until = now.Add(next.backoff)
		if b.ejection.CompareAndSwap(e, next) {
			b.ejections.Add(1)
			return true
		}
		// Another call re-opened or closed the breaker first; look again.
	}
}

// countFailure counts a failure of a closed breaker and opens it at the
// threshold.
func (b *Breaker) countFailure() bool {
	if b.failures.Add(1) < b.threshold {
		return false
	}
	e := &ejection{until: b.now().Add(b.minBackoff), backoff: b.minBackoff}
	if !b.ejection.CompareAndSwap(nil, e) {
		return false // a concurrent failure opened it
	}
	b.failures.Store(0)
	b.ejections.Add(1)
	return true
}

func (b *Breaker) double(d time.Duration) time.Duration {
	if d > b.maxBackoff/2 {
		return b.maxBackoff
	}
	return 2 * d
}

// State returns the breaker's current state. Like Allow, it is lock-free.
func (b *Breaker) State() BreakerState {
	e := b.ejection.Load()
	switch {
	case e == nil:
		return Closed
	case b.now().Before(e.until):
		return Open
	}
	return HalfOpen
}

// Ejections returns how many times the breaker has opened, re-openings
// from half-open included. (pdlb counts its ejections where Failure
// reports them, beside the worker's other metrics.)
func (b *Breaker) Ejections() uint64 {
	return b.ejections.Load()
}
