package bench

// report merges the workers' figures; every round has ended.
func (r *runner) report() *Report {
	rep := r.newReport()
	t := r.total()
	rep.Requests += t.requests // after any dropped arrivals
	rep.OK += t.ok
	rep.OutputTokens += t.tokens
	rep.setCache(t.cache)
	rep.Events += t.events
	for k, n := range t.errs {
		rep.Errors[k] += n
	}
	if s := rep.Elapsed.Seconds(); s > 0 {
		rep.RequestsPerSec = float64(rep.OK) / s
		rep.OutputTokensPerSec = float64(rep.OutputTokens) / s
	}
	if r.cfg.Stream {
		r.setEventRate(rep, t.windowEvents, t.cutEvents)
	}
	rep.Latency = summarize(t.latency)
	rep.TTFT = summarize(t.ttft)
	rep.ITL = summarize(t.itl)
	rep.EventLag = summarize(t.lag)
	return rep
}

// newReport returns a Report of what the run was asked to do and of the
// figures the runner keeps itself (warm-up, drops, give-up, error
// messages, measured time), which the workers' are added to. Settings
// that did not apply to the run stay zero, so the report does not show
// them: the prompt length with a prompt file, the model on /generate, the
// rate in the closed loop.
func (r *runner) newReport() *Report {
	rep := &Report{
		Name:           r.name,
		URL:            r.url,
		Endpoint:       r.t.uri,
		Route:          r.cfg.Route,
		Stream:         r.cfg.Stream,
		Concurrency:    r.cfg.Concurrency,
		MaxNewTokens:   r.cfg.MaxNewTokens,
		Prompts:        len(r.cfg.Prompts),
		Seed:           r.cfg.Seed,
		MaxRequests:    r.cfg.Requests,
		Duration:       r.cfg.Duration,
		Warmup:         r.cfg.Warmup,
		Timeout:        r.cfg.Timeout,
		Errors:         make(map[string]int),
		WarmupRequests: int(r.warm.Load()),
		Interrupted:    r.interrupted.Load(),
		Elapsed:        r.measuredTime(),
		ErrorMessages:  r.errLog.snapshot(),
	}
	rep.GaveUp, rep.GaveUpMessages = r.gaveUpReason()
	switch {
	case r.cfg.SharedPrefix != nil:
		rep.Workload, rep.SharedPrefix = WorkloadSharedPrefix, r.cfg.SharedPrefix
		rep.MaxNewTokens = Dist{}
		rep.BestCacheHitRate = r.wl.gsp.best
	case len(r.cfg.Prompts) == 0:
		rep.PromptWords = r.cfg.PromptWords
	}
	if r.cfg.Route != RouteGenerate {
		rep.Model = r.cfg.Model
	}
	if r.cfg.openLoop() {
		rep.Rate, rep.MaxInflight = r.cfg.Rate, r.cfg.MaxInflight
	}
	if r.dropped > 0 {
		rep.Requests, rep.Errors[KindDropped] = r.dropped, r.dropped
	}
	return rep
}

// total sums the workers' tallies, their samples in the workers' order, so
// that report reads one tally rather than every worker; every round has
// ended. Busy time is left out: measuredTime weighs each worker's own.
func (r *runner) total() tally {
	t := tally{errs: make(map[string]int)}
	for _, w := range r.pool.all {
		t.requests += w.requests
		t.ok += w.ok
		t.tokens += w.tokens
		t.cache.merge(w.cache)
		t.events += w.events
		t.windowEvents += w.windowEvents
		t.cutEvents += w.cutEvents
		for k, n := range w.errs {
			t.errs[k] += n
		}
		t.latency = append(t.latency, w.latency...)
		t.ttft = append(t.ttft, w.ttft...)
		t.itl = append(t.itl, w.itl...)
		t.lag = append(t.lag, w.lag...)
	}
	return t
}

// setEventRate sets a stream run's Events, EventWindow and EventsPerSec
// from the events counted in measured windows (windowEvents) and those of
// streams the interrupt cut (cutEvents). A run bounded by Duration counts
// the events that arrived within its windows, over their length, of every
// stream but those that failed inside them (worker.one says why); other
// runs count the events of their successful measured requests over
// Elapsed.
func (r *runner) setEventRate(rep *Report, windowEvents, cutEvents int64) {
	switch {
	case r.cfg.Duration > 0:
		rep.Events, rep.EventWindow = windowEvents, r.window
	case r.cfg.openLoop() && rep.Interrupted:
		// Elapsed runs to the cut: the cut streams' events
		// arrived within it.
		rep.Events += cutEvents
		rep.EventWindow = rep.Elapsed
	default:
		rep.EventWindow = rep.Elapsed
	}
	if s := rep.EventWindow.Seconds(); s > 0 {
		rep.EventsPerSec = float64(rep.Events) / s
	}
}
