package bench

import (
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
	cfg = cfg.withDefaults()
	t, err := newTarget(cfg.URL, cfg.Route, cfg.Dial, cfg.Concurrency, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	defer t.close()
	r := &runner{ctx: ctx, cfg: cfg, t: t, wl: newWorkload(&cfg)}
	return r.report(r.run()), nil
}

// runner holds the state of one run that its workers share.
type runner struct {
	ctx context.Context
	cfg Config
	t   *target
	wl  *workload

	start        time.Time
	measureStart time.Time // end of the warm-up
	measureEnd   time.Time // zero when only Requests bounds the run

	issued      atomic.Int64  // measured requests started
	seq         atomic.Uint64 // request numbers, for prompts
	done        atomic.Int64  // measured requests finished
	failed      atomic.Int64  // ... of which failed
	warm        atomic.Int64  // warm-up requests finished
	interrupted atomic.Bool
}

// run starts the workers and returns them once they have all stopped.
func (r *runner) run() []*worker {
	r.start = time.Now()
	r.measureStart = r.start.Add(r.cfg.Warmup)
	if r.cfg.Duration > 0 {
		r.measureEnd = r.measureStart.Add(r.cfg.Duration)
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { r.cutOnCancel(stop) })
	if r.cfg.Progress != nil {
		bg.Go(func() { r.showProgress(stop) })
	}
	ws := make([]*worker, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = newWorker(r)
		wg.Go(ws[i].loop)
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	return ws
}

// cutOnCancel closes every connection when ctx is cancelled, since a
// fasthttp request can only be interrupted that way.
func (r *runner) cutOnCancel(stop <-chan struct{}) {
	select {
	case <-r.ctx.Done():
		r.interrupted.Store(true)
		r.t.close()
	case <-stop:
	}
}

// admit decides whether a request starting at now is sent, and whether it
// is measured. Warm-up requests are sent but not measured.
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

// report merges the workers' figures.
func (r *runner) report(ws []*worker) *Report {
	rep := &Report{
		URL:            r.cfg.URL,
		Route:          r.cfg.Route,
		Stream:         r.cfg.Stream,
		Concurrency:    r.cfg.Concurrency,
		Errors:         make(map[string]int),
		WarmupRequests: int(r.warm.Load()),
		Interrupted:    r.interrupted.Load(),
	}
	var (
		last               time.Time
		latency, ttft, itl []time.Duration
	)
	for _, w := range ws {
		rep.Requests += w.requests
		rep.OK += w.ok
		rep.OutputTokens += w.tokens
		for k, n := range w.errs {
			rep.Errors[k] += n
		}
		latency = append(latency, w.latency...)
		ttft = append(ttft, w.ttft...)
		itl = append(itl, w.itl...)
		if w.last.After(last) {
			last = w.last
		}
	}
	if last.After(r.measureStart) {
		rep.Elapsed = last.Sub(r.measureStart)
	}
	if s := rep.Elapsed.Seconds(); s > 0 {
		rep.RequestsPerSec = float64(rep.OK) / s
		rep.OutputTokensPerSec = float64(rep.OutputTokens) / s
	}
	rep.Latency = summarize(latency)
	rep.TTFT = summarize(ttft)
	rep.ITL = summarize(itl)
	return rep
}
