package bench

import (
	"math/rand/v2"
	"sync"
	"time"
)

// maxOverrun is how far past the end of its window the open loop may run
// to catch up on arrivals due within it. At a rate the generator cannot
// keep up with, each arrival costs more than its gap (at 1e10/s the gaps
// round to zero and the schedule stops moving), so without this bound a
// run would never reach the end of its schedule.
const maxOverrun = 100 * time.Millisecond

// arrivals draws the gaps between the arrivals of a Poisson process:
// exponentially distributed, of mean 1/rate, from a generator seeded with
// the run's Seed, so the same seed gives the same schedule. It is not safe
// for concurrent use.
type arrivals struct {
	rng  *rand.Rand
	mean float64 // nanoseconds
}

func newArrivals(rate float64, seed uint64) *arrivals {
	// Another stream than the prompt's words, so the two do not echo
	// each other.
	return &arrivals{rng: rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909)), mean: 1e9 / rate}
}

// next returns the time from the previous arrival to the next one.
func (a *arrivals) next() time.Duration {
	gap := a.rng.ExpFloat64() * a.mean
	if gap >= float64(maxGap) {
		// A tiny rate's gap would overflow a Duration into a negative
		// one, which would make every arrival late, and send it at once.
		return maxGap
	}
	return time.Duration(gap)
}

// maxGap bounds the gap between two arrivals: a century, never reached.
const maxGap = 100 * 365 * 24 * time.Hour

// openLoop sends a request at each arrival of the round, on a worker of
// its own, until the runner says stop; an arrival that finds MaxInflight
// requests in flight is dropped. It returns once every request sent has
// ended.
//
// Arrivals follow the schedule, not the clock: one that comes late (the
// timer woke late, or the machine is busy) is sent at once, and counts as
// arriving when it was due. So the count of requests, and which are
// measured, depend on Seed alone, and a late generator catches up rather
// than lowering the rate. Latency still runs from the actual send. The
// clock ends the round all the same once it is maxOverrun past the window:
// a generator that far behind has no schedule left to keep.
//
// A round the window ends lasts until the window's end, even when its last
// arrival comes, and its requests end, well before: the window is the
// measured time (roundElapsed).
func (r *runner) openLoop() {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	at := r.start
	for {
		at = at.Add(r.arr.next())
		send, measured := r.admit(at)
		if !send || r.overran() || !r.waitUntil(at, timer) {
			if !r.measureEnd.IsZero() && !r.countEnded() {
				r.waitUntil(r.measureEnd, timer)
			}
			return
		}
		w := r.pool.get()
		if w == nil {
			r.drop(measured)
			continue
		}
		wg.Go(func() {
			w.one(measured)
			r.pool.put(w)
		})
	}
}

// countEnded reports whether Requests refused an arrival inside the
// window: the count, not the window, ended the arrivals.
func (r *runner) countEnded() bool {
	return r.cfg.Requests > 0 && r.issued.Load() > int64(r.cfg.Requests)
}

// overran reports whether the clock is more than maxOverrun past the end
// of the round's window.
func (r *runner) overran() bool {
	return !r.measureEnd.IsZero() && time.Since(r.measureEnd) > maxOverrun
}

// waitUntil waits for t on timer; it reports false if the run was
// cancelled first.
func (r *runner) waitUntil(t time.Time, timer *time.Timer) bool {
	d := time.Until(t)
	if d <= 0 {
		return r.ctx.Err() == nil
	}
	timer.Reset(d)
	select {
	case <-timer.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// drop counts an arrival that found no room.
func (r *runner) drop(measured bool) {
	if !measured {
		return // a warm-up arrival: no figure at all
	}
	r.dropped++
	r.done.Add(1)
	r.failed.Add(1)
}
