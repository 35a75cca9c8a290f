package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// A target whose every request fails (a wrong URL, a dead server, a
// missing API key) fails them fast: a run went on to its end with 14,580
// 404s, and a refused connection costs microseconds (issue 20). Giving up
// after a few seconds of nothing but failures ends it with what they said.
const (
	// defaultGiveUpAfter is Config.GiveUpAfter's default.
	defaultGiveUpAfter = 3 * time.Second
	// giveUpMinFailures is the fewest failures in a row that give a target
	// up, so that one slow failure (a timeout of a minute) does not.
	giveUpMinFailures = 5
)

// NoGiveUp, as Config.GiveUpAfter, never gives a target up.
const NoGiveUp time.Duration = math.MaxInt64

// errGaveUp is the cause of a run's context cancelled by a give-up, told
// apart from an interrupt.
var errGaveUp = errors.New("gave up on a target whose every request failed")

// streak follows a target's failures in a row: since its first, how
// many, and what they said, until a success ends it. It also counts the
// requests in flight, to tell those that started before the streak: one
// of them may yet succeed. It is safe for concurrent use. A request that
// succeeds outside a streak costs three atomic operations and no lock; one
// in flight when a streak started takes the lock once more at its end.
type streak struct {
	failing atomic.Bool
	// flight packs the streak generation (the high 32 bits), which each
	// streak's start increments, with the number of requests in flight
	// (the low 32), so that a request's start reads the one as it counts
	// itself in the other, and a streak's start counts the requests in
	// flight as it moves the generation on.
	flight atomic.Uint64

	mu       sync.Mutex
	since    time.Time // end of the streak's first failure, moved on by pauses
	fails    int
	older    int       // requests in flight at the streak's start, not ended since
	pausedAt time.Time // end of the target's last turn in Compare; zero: none
	log      errorLog  // the streak's distinct failures
}

// begin counts a request starting, and returns its generation for end.
func (s *streak) begin() uint32 {
	return uint32(s.flight.Add(1) >> 32)
}

// end counts the end of a request begun in generation gen, before its
// outcome is noted.
func (s *streak) end(gen uint32) {
	now := uint32(s.flight.Add(^uint64(0)) >> 32) // minus one
	if now == gen {
		return // no streak started while it was in flight
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Streaks start under mu: if none started since the decrement, the
	// current one counted this request among its older ones.
	if uint32(s.flight.Load()>>32) == now {
		s.older--
	}
}

// succeeded ends the streak, if any.
func (s *streak) succeeded() {
	if !s.failing.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing.Store(false)
}

// failed counts a failure of kind, saying msg, that ended at now, and
// returns the streak's length and count. When they reach after and
// giveUpMinFailures, and no request that started before the streak is
// still in flight, it also returns the streak's distinct failures: the
// target is given up.
func (s *streak) failed(now time.Time, kind string, msg []byte, after time.Duration) (d time.Duration, fails int, messages []ErrorMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.failing.Load() {
		s.start(now)
	}
	s.fails++
	s.log.add(kind, msg)
	d = now.Sub(s.since)
	if d >= after && s.fails >= giveUpMinFailures && s.older == 0 {
		messages = s.log.snapshot()
	}
	return d, s.fails, messages
}

// start begins a streak at now, its first failure's end: the requests in
// flight then are older than it. s.mu is held.
func (s *streak) start(now time.Time) {
	s.failing.Store(true)
	s.since, s.fails = now, 0
	s.log.restore(nil)
	for {
		f := s.flight.Load()
		if s.flight.CompareAndSwap(f, f+1<<32) {
			s.older = int(uint32(f))
			return
		}
	}
}

// pause notes the end of the target's turn, at now, in Compare.
func (s *streak) pause(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pausedAt = now
}

// resume notes the start of the target's next turn, at now: a streak
// counts the target's own time, not the other targets' turns between its
// failures. A target that failed at the end of one turn and at the start
// of the next was given up for the time the others took in between
// (issue 20).
func (s *streak) resume(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing.Load() && !s.pausedAt.IsZero() {
		s.since = s.since.Add(now.Sub(s.pausedAt))
	}
	s.pausedAt = time.Time{}
}

// giveUp is why a runner gave its target up.
type giveUp struct {
	reason   string
	messages []ErrorMessage // the distinct failures of the streak
}

// clock returns the time of the give-up rule: Config.now, or t.
func (r *runner) clock(t time.Time) time.Time {
	if r.cfg.now != nil {
		return r.cfg.now()
	}
	return t
}

// noteOutcome follows the target's failures in a row, warm-up and
// measured requests alike, and stops the run when they reach
// Config.GiveUpAfter with no request older than the first still in flight:
// kind and msg are the failure that ended at end (kind empty for a
// success). A target at its admission limit (pdlb's
// --max-concurrent-requests) answers the other clients 429 at once while
// long generations hold its slots; those 429s were taken for a dead target
// before the first generation ended (issue 20).
func (r *runner) noteOutcome(kind string, msg []byte, end time.Time) {
	if kind == "" {
		r.streak.succeeded()
		return
	}
	d, fails, messages := r.streak.failed(r.clock(end), kind, msg, r.cfg.GiveUpAfter)
	if messages == nil {
		return
	}
	reason := fmt.Sprintf("no request succeeded in %v and %d failed; the last: %s", d.Round(time.Millisecond), fails, kind)
	if len(msg) > 0 {
		reason += ": " + string(msg)
	}
	g := &giveUp{reason: reason, messages: messages}
	if r.gaveUp.CompareAndSwap(nil, g) {
		r.stop(errGaveUp)
	}
}

// gaveUp reports whether a give-up, not an interrupt, cancelled ctx.
func gaveUp(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errGaveUp)
}

// gaveUpReason returns why the runner gave its target up and the
// streak's distinct failures, or "" and nil.
func (r *runner) gaveUpReason() (string, []ErrorMessage) {
	if g := r.gaveUp.Load(); g != nil {
		return g.reason, g.messages
	}
	return "", nil
}
