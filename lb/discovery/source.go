package discovery

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Source resolves a set of names every Interval and tells its owner how
// the set of workers they give changes. Create it with New; the zero value
// is not usable. Its methods are safe for concurrent use; refreshes never
// overlap.
type Source struct {
	cfg      Config
	names    []name
	resolver *net.Resolver

	// round is held for a whole refresh, lookups and delivery included, so
	// that changes reach OnChange one at a time and in order.
	round sync.Mutex
	// states (one per name, in order) and set are guarded by round.
	states []nameState
	set    workerSet
	// current is the set after the last refresh, for Workers.
	current atomic.Pointer[[]Worker]
}

// nameState is what a Source remembers of one name between refreshes.
type nameState struct {
	// good is the last answer taken, sorted.
	good []Worker
	// keeping tells whether the last answer was not taken, so that the
	// log says when that starts and stops rather than every Interval.
	keeping bool
	// empty tells whether the name answers no worker and has none kept,
	// so that the log says it once.
	empty bool
}

// New returns a Source for cfg, or an error naming the first field or name
// that cannot be used. Nothing is resolved until Refresh or Run.
func New(cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := parseNames(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Log = cfg.Log.With().Str("component", "discovery").Logger()
	s := &Source{
		cfg:      cfg,
		names:    names,
		resolver: newResolver(cfg.Server),
		states:   make([]nameState, len(names)),
		set:      workerSet{byKey: map[key]seenWorker{}},
	}
	s.current.Store(&[]Worker{})
	return s, nil
}

// Workers returns the current set of workers, sorted by role then URL.
// The caller must not modify the slice.
func (s *Source) Workers() []Worker {
	return *s.current.Load()
}

// Run refreshes at once and then every Interval until ctx is done. A
// refresh that outlasts Interval delays the next rather than queueing it.
func (s *Source) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh resolves every name once, within Interval, and delivers the
// change, if any, to OnChange before it returns. A name whose lookups fail
// or whose answer is empty after a non-empty one counts as answering its
// last good workers; a worker missing from every answer for RemoveAfter is
// removed.
//
// A refresh whose ctx is done before it ends (the owner shutting down)
// changes nothing, rather than count and log the lookups it cut short.
func (s *Source) Refresh(ctx context.Context) {
	s.round.Lock()
	defer s.round.Unlock()
	lookupCtx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	var seen []Worker
	for i, n := range s.names {
		ws, err := s.resolve(lookupCtx, n)
		if ctx.Err() != nil {
			return
		}
		seen = append(seen, s.take(n, &s.states[i], ws, err)...)
	}
	c := s.set.update(seen, time.Now(), s.cfg.RemoveAfter)
	if c.IsEmpty() {
		return
	}
	current := s.set.workers()
	s.current.Store(&current)
	s.logChange(c)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(c)
	}
}

// take returns the workers that name n is taken to answer: ws, unless the
// lookup failed (err) or ws is empty after a non-empty answer, in which
// case the last good answer is kept, counted and, when it starts, logged.
func (s *Source) take(n name, st *nameState, ws []Worker, err error) []Worker {
	keep := err != nil || (len(ws) == 0 && len(st.good) > 0)
	if !keep {
		if st.keeping {
			s.cfg.Log.Info().Stringer("name", n).Int("workers", len(ws)).Msg("dns name answers again; taking its answer")
		}
		if len(ws) == 0 && !st.empty {
			// Never answered (a typo, a Service not created yet): its
			// pool waits for it, which the operator must hear of.
			s.cfg.Log.Warn().Stringer("name", n).Msg("dns name answers no address; no worker found under it yet")
		}
		st.good, st.keeping, st.empty = ws, false, len(ws) == 0
		return ws
	}
	if s.cfg.Kept != nil {
		s.cfg.Kept.Inc()
	}
	e := s.cfg.Log.Debug()
	if !st.keeping {
		e = s.cfg.Log.Warn()
	}
	if err != nil {
		e = e.Err(err)
	} else {
		e = e.Str("answer", "empty")
	}
	e.Stringer("name", n).Int("workers", len(st.good)).Msg("dns name gave no usable answer; keeping its last good workers")
	st.keeping = true
	return st.good
}

// logChange logs each worker added or removed, at debug level: the caller
// logs what it applies.
func (s *Source) logChange(c Change) {
	for _, w := range c.Removed {
		s.cfg.Log.Debug().Stringer("role", w.Role).Str("url", w.URL).Msg("dns worker removed")
	}
	for _, w := range c.Added {
		s.cfg.Log.Debug().Stringer("role", w.Role).Str("url", w.URL).Int("bootstrap_port", w.BootstrapPort).Msg("dns worker added")
	}
}
