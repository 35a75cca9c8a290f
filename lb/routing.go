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
func (pool *Pool) setPolicy(cfg *Config, ms *metrics.Set, log zerolog.Logger) {
	names := make([]string, len(pool.backends))
	for i, b := range pool.backends {
		names[i] = b.url
	}
	switch pool.policy {
	case PolicyCacheAware:
		pool.cache = policy.NewCacheAware(cfg.CacheAware)
		for _, b := range pool.backends {
			b.prefixes = pool.cache
		}
	case PolicyPrefixHash, PolicyConsistentHashing:
		pool.ring = policy.NewRing(names)
		pool.hash = policy.DefaultPrefixHash()
		pool.hash.Tokens = cfg.PrefixHashTokens
	case PolicyManual:
		// Config.Validate has refused an assignment mode NewManual would.
		pool.sticky, _ = policy.NewManual(cfg.Manual)
		pool.sticky.SetWorkers(names)
	}
	pool.now = cfg.Now
	pool.kind = kindOf(pool.policy)
	if pool.kind >= kindRouted {
		labels := fmt.Sprintf(`role=%q,policy=%q`, pool.role, pool.policy)
		for _, r := range policy.Reasons() {
			pool.decisions = append(pool.decisions, ms.NewCounter(fmt.Sprintf(`pdlb_routing_decisions_total{%s,reason=%q}`, labels, r)))
		}
	}
	if pool.cache != nil {
		pool.matchRatio = ms.NewHistogram(fmt.Sprintf(`pdlb_cache_aware_match_ratio{role=%q}`, pool.role))
		for i, b := range pool.backends {
			ms.NewGauge(fmt.Sprintf(`pdlb_cache_aware_tree_bytes{role=%q,backend=%q}`, pool.role, b.addr), func() float64 {
				return float64(pool.cache.Size(i, policy.UnitByte)) // lb's keys are bytes (bootstrap's routing key)
			})
		}
	}
	pool.log = log
}

// buildLoads sets up the polling of the workers' reported loads, for the
// pools whose policy weighs them, and the prefills under --prefill-dp-policy
// least_inflight; none when no pool needs them.
func (s *Server) buildLoads() {
	var polled []*Pool
	for _, p := range []*Pool{s.prefills, s.decodes, s.fallbacks} {
		if weighsLoads(p.policy) || p == s.prefills && s.cfg.PrefillDPPolicy == DPPolicyLeastInflight {
			polled = append(polled, p)
		}
	}
	if len(polled) == 0 {
		return
	}
	var targets []load.Target
	byAddr := map[string]*Backend{}
	for _, p := range polled {
		for _, b := range p.backends {
			targets = append(targets, load.Target{Addr: b.addr, TLS: b.hc.IsTLS, Authorization: s.workerAuthorization()})
			byAddr[b.addr] = b
		}
	}
	s.loads = load.New(load.Config{
		Targets:   targets,
		Interval:  s.cfg.LoadCheckInterval,
		Timeout:   min(s.cfg.LoadCheckInterval, 5*time.Second),
		Dial:      s.link.dialer.DialTimeout,
		TLSConfig: s.cfg.WorkerTLS,
		Own: func(addr string, rank int) int64 {
			if b := byAddr[addr]; b != nil {
				return b.ownInflight(rank)
			}
			return 0
		},
		Log: s.log.With().Str("component", "load").Logger(),
	})
	for _, p := range polled {
		p.loads = s.loads
		for _, b := range p.backends {
			labels := fmt.Sprintf(`role=%q,backend=%q`, p.role, b.addr)
			s.ms.NewGauge(`pdlb_backend_reported_load{`+labels+`}`, func() float64 {
				if l, ok := s.loads.Get(b.addr).Load(); ok {
					return float64(l)
				}
				return math.NaN()
			})
		}
	}
}

// runRouting starts what the policies need in the background: the load
// polls, and cache_aware's eviction down to --max-tree-size.
func (s *Server) runRouting() {
	if s.loads != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.loads.Run(s.ctx.Done())
		}()
	}
	for _, p := range []*Pool{s.prefills, s.decodes, s.fallbacks} {
		switch {
		case p.cache != nil:
			s.every(s.cfg.CacheAware.EvictionInterval, p.cache.Evict)
		case p.policy == PolicyPrefixHash:
			s.every(loadSample, p.smoothLoads)
		case p.sticky != nil:
			s.every(time.Minute, func() { p.sticky.Evict(s.cfg.Now()) })
		}
	}
}

// every runs f every interval in the background until the server shuts
// down.
func (s *Server) every(interval time.Duration, f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
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
	}()
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
	for _, b := range p.backends {
		now := int64(b.inflight.Load()) * 1000
		mean := b.meanInflight.Load()
		b.meanInflight.Store(mean + (now-mean)/weight)
	}
}
