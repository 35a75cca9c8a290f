package lb

import (
	"fmt"
	"math"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/lb/load"
	"pdlb/lb/policy"
)

// setPolicy gives pool the state its policy keeps, as cfg sets it up, and
// its counters in ms.
// Its workers join later (Pool.join).
func (pool *Pool) setPolicy(cfg *Config, ms *metrics.Set, log zerolog.Logger) {
	pool.kind = kindOf(pool.policy)
	switch pool.kind {
	case kindCacheAware:
		pool.cache = policy.NewCacheAware(cfg.CacheAware)
	case kindPrefixHash:
		pool.hash = policy.DefaultPrefixHash()
		pool.hash.Tokens = cfg.PrefixHashTokens
	case kindManual:
		// Config.Validate has refused an assignment mode NewManual would.
		pool.sticky, _ = policy.NewManual(cfg.Manual)
	}
	pool.ms = ms
	pool.publish(nil, nil)
	pool.now = cfg.Now
	if pool.kind >= kindRouted {
		labels := fmt.Sprintf(`role=%q,policy=%q`, pool.role, pool.policy)
		for _, r := range policy.Reasons() {
			pool.decisions = append(pool.decisions, ms.NewCounter(fmt.Sprintf(`pdlb_routing_decisions_total{%s,reason=%q}`, labels, r)))
		}
	}
	if pool.cache != nil {
		pool.matchRatio = ms.NewHistogram(fmt.Sprintf(`pdlb_cache_aware_match_ratio{role=%q}`, pool.role))
	}
	pool.log = log
}

// buildLoads sets up the polling of the workers' reported loads, for the
// pools whose policy weighs them, and the prefills under --prefill-dp-policy
// least_inflight; none when no pool needs them.
func (s *Server) buildLoads() {
	var polled []*Pool
	for _, p := range s.pools() {
		if p.kind.weighsLoads() || p == s.prefills && s.cfg.PrefillDPPolicy == DPPolicyLeastInflight {
			polled = append(polled, p)
		}
	}
	if len(polled) == 0 {
		return
	}
	s.loads = load.New(load.Config{
		Interval:  s.cfg.LoadCheckInterval,
		Timeout:   min(s.cfg.LoadCheckInterval, 5*time.Second),
		Dial:      s.link.dialer.DialTimeout,
		TLSConfig: s.cfg.WorkerTLS,
		Own: func(addr string, rank int) int64 {
			if b := s.polledBackend(addr); b != nil {
				return b.ownInflight(rank)
			}
			return 0
		},
		Log: s.log.With().Str("component", "load").Logger(),
	})
	for _, p := range polled {
		p.loads = s.loads
		for _, b := range p.backends() {
			s.pollLoad(p, b)
		}
	}
}

// pollLoad has the poller follow b's load, when p's policy weighs loads.
func (s *Server) pollLoad(p *Pool, b *Backend) {
	if p.loads == nil {
		return
	}
	p.loads.Add(load.Target{Addr: b.addr, TLS: b.hc.IsTLS, Authorization: s.workerAuthorization()})
	s.ms.NewGauge(b.series1(`pdlb_backend_reported_load{`+b.labels()+`}`), func() float64 {
		if l, ok := s.loads.Get(b.addr).Load(); ok {
			return float64(l)
		}
		return math.NaN()
	})
}

// polledBackend returns the member of a polled pool at addr, nil if none.
// The poller asks it once per worker and round, off the request path.
func (s *Server) polledBackend(addr string) *Backend {
	for _, p := range s.pools() {
		if p.loads == nil {
			continue
		}
		for _, b := range p.backends() {
			if b.addr == addr {
				return b
			}
		}
	}
	return nil
}

// runRouting starts what the policies need in the background: the load
// polls, and cache_aware's eviction down to --max-tree-size.
func (s *Server) runRouting() {
	if s.loads != nil {
		s.bg.Go(func() {
			s.loads.Run(s.ctx.Done())
		})
	}
	for _, p := range s.pools() {
		switch {
		case p.cache != nil:
			s.every(s.cfg.CacheAware.EvictionInterval, p.cache.Evict)
		case p.kind == kindPrefixHash:
			s.every(loadSample, p.smoothLoads)
		case p.sticky != nil:
			s.every(time.Minute, func() { p.sticky.Evict(s.cfg.Now()) })
		}
	}
}

// every runs f every interval in the background until the server shuts
// down.
func (s *Server) every(interval time.Duration, f func()) {
	s.bg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				f()
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// loadSample is how often smoothLoads samples the requests in flight; its
// average reaches a step's value within about loadWindow.
const (
	loadSample = 50 * time.Millisecond
	loadWindow = time.Second
)

// smoothLoads moves each backend's mean requests in flight towards its
// count now: an exponential average with a time constant of loadWindow.
func (p *Pool) smoothLoads() {
	const weight = int64(loadWindow / loadSample)
	for _, b := range p.backends() {
		now := int64(b.inflight.Load()) * 1000
		mean := b.meanInflight.Load()
		b.meanInflight.Store(mean + (now-mean)/weight)
	}
}
