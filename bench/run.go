package bench

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Run validates cfg, drives the target with it and returns the figures.
// It returns an error only for an invalid Config; failed requests are
// counted in the Report. Cancelling ctx ends the run at once: requests in
// flight are cut and dropped, and the Report (with Interrupted set) holds
// what finished before. Run may be called concurrently with independent
// Configs.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	route, err := resolveRoute(cfg.Route, cfg.URL)
	if err != nil {
		return nil, err
	}
	cfg.Route = route
	cfg = cfg.withDefaults()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r, err := newRunner(ctx, stop, &cfg, Target{URL: cfg.URL})
	if err != nil {
		return nil, err
	}
	defer r.t.close()
	if cfg.Duration > 0 {
		r.schedTotal = cfg.Warmup + cfg.Duration
	}
	r.progress = newProgress(&cfg)
	r.progress.start()
	defer r.progress.end()
	r.round(cfg.Warmup, cfg.Duration)
	return r.report(), nil
}

// runner is the load on one target, over one round in Run or several in
// Compare. Its workers, arrivals and figures carry over from round to
// round. The goroutine that calls round owns it; workers share only its
// atomics, and the fields a round sets before starting them.
type runner struct {
	ctx  context.Context // the run's: cancelled by an interrupt or a give-up
	stop context.CancelCauseFunc
	cfg  *Config
	name string // the target's name in Compare, "" in Run
	url  string
	t    *target
	wl   *workload
	arr  *arrivals // open loop only
	pool pool

	progress     *progress     // nil: none
	label        string        // shown before the progress display
	schedBefore  time.Duration // scheduled time of the run before this round (Compare)
	schedTotal   time.Duration // scheduled time of the whole run; zero when only Requests bounds it
	start        time.Time     // of the current round
	measureStart time.Time     // end of the round's warm-up
	measureEnd   time.Time     // zero when only Requests bounds the run
	elapsed      time.Duration // the rounds' measured time (not kept for a closed loop bounded by Duration)
	window       time.Duration // the measured windows' total length
	cutAt        time.Time     // when ctx cut the run; zero while it has not
	dropped      int           // measured arrivals the open loop could not send
	errLog       errorLog      // the first distinct failures of measured requests

	issued      atomic.Int64  // measured requests started
	seq         atomic.Uint64 // request numbers, for prompts
	done        atomic.Int64  // measured requests finished
	failed      atomic.Int64  // ... of which failed
	warm        atomic.Int64  // warm-up requests finished
	interrupted atomic.Bool
	streak      streak                 // failures in a row, for GiveUpAfter
	gaveUp      atomic.Pointer[giveUp] // why the run gave the target up
}

// newRunner prepares the load cfg describes on target tg; cfg has its
// defaults and is shared, read-only, by every runner of a Compare. stop
// cancels ctx, to give up.
func newRunner(ctx context.Context, stop context.CancelCauseFunc, cfg *Config, tg Target) (*runner, error) {
	t, err := newTarget(ctx, tg.URL, cfg.Route, cfg.Dial, cfg.maxConns(), cfg.Timeout)
	if err != nil {
		return nil, err
	}
	t.staleAfter = cmp.Or(cfg.staleCheckAfter, staleCheckAfter)
	r := &runner{ctx: ctx, stop: stop, cfg: cfg, name: tg.Name, url: tg.URL, t: t, wl: newWorkload(cfg)}
	if cfg.openLoop() {
		r.arr = newArrivals(cfg.Rate, cfg.Seed)
	}
	r.pool = pool{max: cfg.maxConns(), free: make(chan *worker, cfg.maxConns()), new: func() *worker { return newWorker(r) }}
	return r, nil
}

// round sends load for warmup, then for a measured window of d (zero: until
// Requests have started), and returns once every request of the round has
// ended, adding the round's measured time to elapsed.
func (r *runner) round(warmup, d time.Duration) {
	r.start = time.Now()
	r.streak.resume(r.clock(r.start))
	defer func() { r.streak.pause(r.clock(time.Now())) }()
	r.measureStart = r.start.Add(warmup)
	r.measureEnd = time.Time{}
	if d > 0 {
		r.measureEnd = r.measureStart.Add(d)
	}
	r.progress.set(&turn{
		r: r, label: r.label, start: r.start, measureStart: r.measureStart, measureEnd: r.measureEnd,
		before: r.schedBefore, total: r.schedTotal, measuredBefore: r.window, requests: int64(r.cfg.Requests),
	})
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { r.cutOnCancel(stop) })
	if r.cfg.openLoop() {
		r.openLoop()
	} else {
		r.closedLoop()
	}
	close(stop)
	bg.Wait()
	before := r.elapsed
	switch {
	case r.cfg.openLoop():
		r.elapsed += r.roundElapsed()
	case r.cfg.Requests > 0:
		r.elapsed += r.roundSpan()
		r.addBusyTime()
	default:
		r.addBusyTime()
	}
	if d > 0 {
		// All of it, unless the run was interrupted within it, or
		// Requests ended it first: its events then came in the time
		// measured.
		w := d
		switch {
		case !r.cutAt.IsZero():
			w = min(d, max(r.cutAt.Sub(r.measureStart), 0))
		case r.countEnded():
			w = min(d, r.elapsed-before)
		}
		r.window += w
	}
}

// inWindow reports whether t falls in the current round's measured window.
func (r *runner) inWindow(t time.Time) bool {
	return !r.measureEnd.IsZero() && !t.Before(r.measureStart) && t.Before(r.measureEnd)
}

// closedLoop runs Concurrency workers, each sending its next request when
// the previous one ends, until the runner says stop. A worker that could
// not connect pauses first (pauseAfterConnectError).
func (r *runner) closedLoop() {
	var wg sync.WaitGroup
	for _, w := range r.pool.grow(r.cfg.Concurrency) {
		wg.Go(func() {
			for {
				send, measured := r.admit(time.Now())
				if !send {
					return
				}
				if w.one(measured) == KindConnect {
					r.pauseAfterConnectError()
				}
			}
		})
	}
	wg.Wait()
}

// connectPause is how long a closed-loop client waits after failing to
// connect. A refused connection fails in microseconds, so a client that
// went straight on sent tens of thousands of requests a second to a dead
// target, taking the CPU the other targets of a Compare needed and making
// a ratio of its error count; at 10 attempts a second it costs nothing,
// and a target that comes back is found soon enough.
const connectPause = 100 * time.Millisecond

// pauseAfterConnectError waits connectPause, or until the round's window
// ends or the run is cut, whichever comes first. The open loop does not
// pause: its arrivals keep their schedule whatever the answers.
func (r *runner) pauseAfterConnectError() {
	d := cmp.Or(r.cfg.connectPause, connectPause)
	if !r.measureEnd.IsZero() {
		d = min(d, time.Until(r.measureEnd))
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.ctx.Done():
	}
}

// roundElapsed returns the open loop's measured time in the round: from
// the end of the warm-up to the end of the window or of the last measured
// request, whichever is later, as SGLang's bench_serving times its run
// until every request it sent has ended. The last request may end before
// the window does, and a window that ended there would count arrivals
// drawn over all of it in part of it. When Requests refused an arrival
// inside the window, the run ends with its last request; when ctx cut the
// round, at the cut. Arrivals follow their schedule whatever the warm-up's
// requests are doing, so the window's start is the measured time's start.
// It clears the workers' ends for the next round; every worker has stopped.
func (r *runner) roundElapsed() time.Duration {
	var end time.Time
	for _, w := range r.pool.all {
		if w.last.After(end) {
			end = w.last
		}
		w.first, w.last = time.Time{}, time.Time{}
	}
	switch {
	case !r.cutAt.IsZero():
		end = r.cutAt
	case !r.measureEnd.IsZero() && !r.countEnded() && r.measureEnd.After(end):
		end = r.measureEnd
	}
	if !end.After(r.measureStart) {
		return 0
	}
	return end.Sub(r.measureStart)
}

// roundSpan returns the closed loop's measured time in a round bounded by
// Requests: from the start of the first measured request of any client to
// the end of the last (zero if none ended). The clients are then not
// equally busy: with 9 requests for 8 clients, one sends two in a row
// while the others wait, and their combined rate (measuredTime) counts
// the 8 as if they too had gone on. Every worker has stopped.
func (r *runner) roundSpan() time.Duration {
	var first, last time.Time
	for _, w := range r.pool.all {
		if w.first.IsZero() {
			continue
		}
		if first.IsZero() || w.first.Before(first) {
			first = w.first
		}
		if w.last.After(last) {
			last = w.last
		}
	}
	if first.IsZero() {
		return 0
	}
	return last.Sub(first)
}

// addBusyTime adds to each client of the closed loop the time from the
// start of its first measured request of the round to the end of its last,
// and clears them for the next round; every worker has stopped.
//
// A closed-loop client is busy with measured requests, back to back, for
// exactly that time. A clock started at the end of the warm-up would also
// count the rest of each warm-up request still in flight then (up to a
// whole request: tens of seconds for long generations), during which the
// client sends nothing measured; one stopped at the last end of all clients
// would count the idle ends of the others. Both lowered the rates, more so
// with a warm-up.
func (r *runner) addBusyTime() {
	for _, w := range r.pool.all {
		if !w.first.IsZero() {
			w.busy += w.last.Sub(w.first)
		}
		w.first, w.last = time.Time{}, time.Time{}
	}
}

// measuredTime returns Report.Elapsed: in the open loop, and in the closed
// loop bounded by Requests, the rounds' measured time; in the closed loop
// bounded by Duration, the time the clients took for the measured requests
// at their combined rate, which is the sum of each client's requests over
// its busy time. With clients equally busy, as they are until a window's
// end, that is their busy time.
func (r *runner) measuredTime() time.Duration {
	if r.cfg.openLoop() || r.cfg.Requests > 0 {
		return r.elapsed
	}
	var perSec float64
	var requests int
	for _, w := range r.pool.all {
		if w.busy > 0 {
			perSec += float64(w.requests) / w.busy.Seconds()
			requests += w.requests
		}
	}
	if perSec == 0 {
		return 0
	}
	return time.Duration(float64(requests) / perSec * float64(time.Second))
}

// cutOnCancel closes every connection when ctx is cancelled, since a
// fasthttp request can only be interrupted that way.
func (r *runner) cutOnCancel(stop <-chan struct{}) {
	select {
	case <-r.ctx.Done():
		r.cutAt = time.Now()
		r.interrupted.Store(!gaveUp(r.ctx))
		r.t.close()
	case <-stop:
	}
}

// admit decides whether a request starting (or, in the open loop,
// arriving) at now is sent, and whether it is measured. Warm-up requests
// are sent but not measured.
func (r *runner) admit(now time.Time) (send, measured bool) {
	switch {
	case r.ctx.Err() != nil:
		return false, false
	case now.Before(r.measureStart):
		return true, false
	case !r.measureEnd.IsZero() && !now.Before(r.measureEnd):
		return false, false
	case r.cfg.Requests > 0 && r.issued.Add(1) > int64(r.cfg.Requests):
		return false, false
	}
	return true, true
}

// mark is a runner's figures at the end of a round, for Compare to go back
// to when a later round is cut short.
type mark struct {
	tallies         []tally // of pool.all, in order
	errors          []ErrorMessage
	elapsed, window time.Duration
	dropped         int
	warm            int64
}

// mark returns the runner's figures; every worker has stopped.
func (r *runner) mark() mark {
	m := mark{elapsed: r.elapsed, window: r.window, dropped: r.dropped, warm: r.warm.Load(), errors: r.errLog.snapshot()}
	for _, w := range r.pool.all {
		m.tallies = append(m.tallies, w.snapshot())
	}
	return m
}

// rollback brings the figures back to m, taken earlier; workers added since
// had measured nothing then. Every worker has stopped.
func (r *runner) rollback(m mark) {
	r.elapsed, r.window, r.dropped = m.elapsed, m.window, m.dropped
	r.warm.Store(m.warm)
	r.errLog.restore(m.errors)
	for i, w := range r.pool.all {
		if i < len(m.tallies) {
			w.tally = m.tallies[i]
		} else {
			w.tally = tally{errs: make(map[string]int)}
		}
	}
}

// pool holds a runner's workers. Only the goroutine driving the load calls
// grow and get; put may be called from any goroutine. A worker taken with
// get belongs to whoever took it until it is put back.
type pool struct {
	all  []*worker
	free chan *worker // idle workers of the open loop; cap max
	max  int
	new  func() *worker
}

// grow makes sure there are at least n workers, and returns the first n.
func (p *pool) grow(n int) []*worker {
	for len(p.all) < n {
		p.all = append(p.all, p.new())
	}
	return p.all[:n]
}

// get returns an idle worker, a new one while there are fewer than max, or
// nil when all max are busy.
func (p *pool) get() *worker {
	select {
	case w := <-p.free:
		return w
	default:
	}
	if len(p.all) >= p.max {
		return nil
	}
	w := p.new()
	p.all = append(p.all, w)
	return w
}

// put gives back a worker taken with get. It never blocks: free has room
// for every worker.
func (p *pool) put(w *worker) { p.free <- w }
