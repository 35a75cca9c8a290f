package lb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"pdlb/lb/policy"
)

// Membership: workers that come and go (issue 23 §1).
//
// Every change of a pool's workers, whatever its source (the command line
// at start, the worker API, DNS or Kubernetes discovery), goes through one
// path: Server.addWorker and Server.removeWorker. Nothing else changes a
// pool.
//
// A pool's workers are an immutable members value behind an atomic
// pointer, replaced whole on every change (copy on write, under the pool's
// changeMu). A pick loads it once and sees one consistent pool; it takes
// no lock and allocates nothing, as before. members holds the workers
// twice: backends, in the order they joined, for iteration and the simple
// policies; and slots, by Backend.slot, with nil where a worker left, for
// package policy, whose worker index is the slot. A slot is stable for
// as long as its worker is a member: cache_aware's trees, manual's names
// and X-SMG-Target-Worker all count on it. A worker that joins takes the
// lowest empty slot, after cache_aware forgot what the slot's last worker
// was sent (CacheAware.AddWorker). The hash ring of prefix_hash and
// consistent_hashing is part of members, rebuilt from the workers' URLs on
// every change: a worker is placed by its URL, never its slot, so replicas
// that saw different histories still agree (policy.NewRing ignores empty
// slots).
//
// Beside the pool, each subsystem knows a worker by an identity of its
// own, taken when it joins and given back when it leaves: the health
// checker's target (Backend.probe, health.Checker.Add/Remove), the load
// poller's address (load.Poller.Add/Remove), and for a prefill the
// bootstrap registry's target (Backend.index, never given twice, so that
// a request in flight on a prefill gone reads it gone, not another's port;
// the registry's callbacks find the prefill in Server.byIndex). Warm pairs
// are kept by prefill and decode (warmer.pairs).
//
// A worker added is health-checked from the checker's next round; it
// takes plain traffic at once (a worker not yet probed counts as up, as at
// startup) unless a probe finds it down. A prefill's bootstrap info is
// learned by the registry (its bootstrap port, when not given, from its
// /server_info, as at startup), and its pairs warmed once it is ready,
// before a request that needs warmth (one naming a DP rank) goes through
// it: such requests wait for their pair (warmer.ensure), as they do at
// startup. The registry's callbacks for a prefill that joins wait until
// it is a member with its pairs (register).
//
// A worker removed is marked leaving first, so that no pick takes it,
// even one that read the pool before (Backend.available); then it leaves
// members, and the policies forget it. Its requests and streams in flight
// go on: the drain waits until none is left, up to Config.DrainTimeout,
// then cuts what is left, closes its idle connections, and unregisters its
// metric series, health target and, for a prefill, registry target. A
// worker added again while it drains is the same Backend, taken back: nothing of it was torn down, and clients see no
// change (remove then re-add is a no-op). Added again after its drain, it
// is a new Backend with fresh series.
//
// A worker stays a member while any of its sources (the command line, the
// worker API, DNS, Kubernetes) still gives it (sources.go). A removed
// worker's requests still running when its drain timeout passes are cut
// (cutCalls): each client gets a 503, or its stream an error event,
// naming the removal.
// The client connection budget, when derived, is derived again as workers
// join and are torn down (resizeConnBudget).

// members is one immutable view of a pool's workers; never modify one.
type members struct {
	// backends are the workers, in the order they joined.
	backends []*Backend
	// slots are the workers by Backend.slot, nil where none is: the worker
	// index of package policy's views.
	slots []*Backend
	// ring places the workers for prefix_hash and consistent_hashing; nil
	// under the other policies.
	ring *policy.Ring
}

// publish makes backends and slots p's members, with the policies' state
// that follows them. changeMu is held, or p is not shared yet.
func (p *Pool) publish(backends, slots []*Backend) {
	m := &members{backends: backends, slots: slots}
	if p.kind == kindPrefixHash || p.kind == kindConsistentHashing {
		m.ring = policy.NewRing(slotNames(slots))
	}
	if p.sticky != nil {
		p.sticky.SetWorkers(slotNames(slots))
	}
	p.members.Store(m)
}

// slotNames are the URLs of slots' workers, "" for an empty slot.
func slotNames(slots []*Backend) []string {
	names := make([]string, len(slots))
	for i, b := range slots {
		if b != nil {
			names[i] = b.url
		}
	}
	return names
}

// join makes b a member of p, at the lowest empty slot.
func (p *Pool) join(b *Backend) {
	p.changeMu.Lock()
	defer p.changeMu.Unlock()
	m := p.members.Load()
	slots := slices.Clone(m.slots)
	b.slot = slices.Index(slots, nil)
	if b.slot < 0 {
		b.slot = len(slots)
		slots = append(slots, nil)
	}
	slots[b.slot] = b
	if p.cache != nil {
		p.cache.AddWorker(b.slot)
		b.prefixes = p.cache
		if !slices.Contains(b.series, treeSeries(b)) { // not when taken back
			p.ms.NewGauge(b.series1(treeSeries(b)), func() float64 {
				return float64(p.cache.Size(b.slot, policy.UnitByte)) // lb's keys are bytes (bootstrap's routing key)
			})
		}
	}
	p.publish(append(slices.Clone(m.backends), b), slots)
}

// treeSeries is the name of b's cache_aware tree size series.
func treeSeries(b *Backend) string {
	return fmt.Sprintf(`pdlb_cache_aware_tree_bytes{role=%q,backend=%q}`, b.role, b.addr)
}

// leave takes b out of p's members and its policies' state. b must be
// marked leaving first, so that no pick of the members before takes it.
func (p *Pool) leave(b *Backend) {
	p.changeMu.Lock()
	defer p.changeMu.Unlock()
	m := p.members.Load()
	slots := slices.Clone(m.slots)
	slots[b.slot] = nil
	// Empty slots at the end are dropped: a pool emptied is empty.
	for len(slots) > 0 && slots[len(slots)-1] == nil {
		slots = slots[:len(slots)-1]
	}
	backends := slices.DeleteFunc(slices.Clone(m.backends), func(o *Backend) bool { return o == b })
	p.publish(backends, slots)
	if p.cache != nil {
		p.cache.RemoveWorker(b.slot)
	}
}

// find returns p's member at url, nil if none. A worker is known by its
// address, however its URL is spelled: "http://10.0.0.1", "10.0.0.1:80"
// and "http://10.0.0.1:80/" are one worker (two backends at one address
// would register the same metric series twice, which panics).
func (p *Pool) find(url string) *Backend {
	addr := workerAddr(url)
	for _, b := range p.backends() {
		if b.addr == addr {
			return b
		}
	}
	return nil
}

// isSelf reports whether url is the address of one of s's own listeners:
// a worker there would be pdlb, calling itself without end.
func (s *Server) isSelf(url string) bool {
	addr := workerAddr(url)
	return s.clientListeners.has(addr) || s.adminListeners.has(addr)
}

// workerAddr is the address (host:port) of the worker at url, or url
// itself when it is no worker URL (then no member has it).
func workerAddr(url string) string {
	w, err := parseWorkerURL(url)
	if err != nil {
		return url
	}
	return w.addr
}

// warnEmptyPools warns of a prefill or decode pool that starts empty with
// no discovery to fill it: only the worker API can then (issue 23 §1), and
// until it does, /readiness answers 503 naming the pool.
func (s *Server) warnEmptyPools() {
	for _, p := range []*Pool{s.prefills, s.decodes} {
		if len(p.backends()) == 0 && !s.cfg.discovers(p.role) {
			s.log.Warn().Str("role", p.role).Msg("no " + p.role + " worker given: the pool starts empty, and " +
				"/readiness answers 503 until one is added (POST /workers on the admin listener, --" + p.role + "-dns or --" + p.role + "-selector)")
		}
	}
}

// discovers reports whether c finds workers of role at run time, in DNS
// or Kubernetes.
func (c *Config) discovers(role string) bool {
	switch role {
	case rolePrefill:
		return len(c.DNS.Prefill)+len(c.Kubernetes.Prefill) > 0
	case roleDecode:
		return len(c.DNS.Decode)+len(c.Kubernetes.Decode) > 0
	case roleFallback:
		return len(c.DNS.Fallback)+len(c.Kubernetes.Fallback) > 0
	}
	return false
}

// pool returns the pool of role, nil for an unknown role.
func (s *Server) pool(role string) *Pool {
	switch role {
	case rolePrefill:
		return s.prefills
	case roleDecode:
		return s.decodes
	case roleFallback:
		return s.fallbacks
	}
	return nil
}

// addWorker adds the worker spec, given by from, to the pool of role
// (rolePrefill, roleDecode or roleFallback; spec.BootstrapPort counts for a
// prefill only, 0 for unknown) and returns its backend. Adding a member
// again adds from to its sources (sources.go) and changes nothing else but
// a prefill's bootstrap port; adding one that drains takes it back (see
// Membership above).
func (s *Server) addWorker(role string, spec PrefillSpec, from source) (*Backend, error) {
	p := s.pool(role)
	if p == nil {
		return nil, fmt.Errorf("unknown worker role %q", role)
	}
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	if b := p.find(spec.URL); b != nil {
		b.sources.Store(uint32(b.givenBy() | from))
		// 0 is "unknown": it must not undo a port another source gave,
		// but from the one source that gives the worker (a pod whose
		// annotation went) it means: learn it from /server_info again.
		if spec.BootstrapPort != 0 || b.givenBy() == from {
			s.repoint(b, spec.BootstrapPort)
		}
		return b, nil
	}
	if b := s.draining[role+" "+workerAddr(spec.URL)]; b != nil {
		delete(s.draining, role+" "+b.addr)
		b.sources.Store(uint32(from))
		b.leaving.Store(false)
		p.join(b)
		s.joinWarm(b)
		if spec.BootstrapPort != 0 {
			s.repoint(b, spec.BootstrapPort)
		}
		b.log.Info().Stringer("source", from).Msg("worker taken back while it drained")
		return b, nil
	}
	b, err := newBackend(role, -1, spec.URL, &s.cfg, s.ms, s.log, s.link)
	if err != nil {
		return nil, fmt.Errorf("invalid %s URL: %w", role, err)
	}
	b.sources.Store(uint32(from))
	joined := s.register(b, spec.BootstrapPort)
	defer joined()
	s.check(b)
	s.pollLoad(p, b)
	p.join(b)
	s.joinWarm(b)
	s.resizeConnBudget()
	b.log.Info().Stringer("source", from).Msg("worker added")
	return b, nil
}

// removeWorker takes from out of the sources of the worker at url in the
// pool of role. When no source is left, the worker leaves the pool at once
// and drains in the background (see Membership above), and removeWorker
// reports it gone; else it stays a member. It returns an error when the
// pool has no such member.
func (s *Server) removeWorker(role, url string, from source) (gone bool, err error) {
	p := s.pool(role)
	if p == nil {
		return false, fmt.Errorf("unknown worker role %q", role)
	}
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	b := p.find(url)
	if b == nil {
		return false, fmt.Errorf("%w: %s is not a %s worker", errNotMember, url, role)
	}
	if left := b.givenBy() &^ from; left != 0 {
		b.sources.Store(uint32(left))
		b.log.Info().Stringer("source", from).Stringer("kept_by", left).Msg("worker no longer given by a source; kept by the others")
		return false, nil
	}
	b.sources.Store(0)
	b.leaving.Store(true)
	p.leave(b)
	s.leaveWarm(b)
	s.draining[role+" "+b.addr] = b
	b.log.Info().Stringer("source", from).Int32("inflight", b.inflight.Load()).Msg("worker removed: draining")
	s.bg.Go(func() { s.drain(p, b) })
	return true, nil
}

// errNotMember is removeWorker's error for a worker its pool does not
// have.
var errNotMember = errors.New("no such worker")

// trimURL is a worker URL as backends keep it.
func trimURL(url string) string {
	for len(url) > 0 && url[len(url)-1] == '/' {
		url = url[:len(url)-1]
	}
	return url
}

// drainPoll is how often a drain looks at a removed worker's requests in
// flight. A drain is no hot path; Shutdown's waits poll too.
const drainPoll = 10 * time.Millisecond

// drain waits until removed b has no request in flight, up to
// Config.DrainTimeout or shutdown, then tears it down, unless it was taken
// back meanwhile.
func (s *Server) drain(p *Pool, b *Backend) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.DrainTimeout)
	defer cancel()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	// The first look comes after one poll, not at once: a request that
	// picked b just before it was marked leaving has not started its call
	// yet, and is counted in flight within microseconds.
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			if s.ctx.Err() == nil { // a shutdown cuts what is left its own way
				n := s.cutCalls(b, drainCut(b, s.cfg.DrainTimeout))
				b.log.Warn().Int("requests", n).Msg("drain timeout: cutting the requests still running on the worker")
			}
			s.teardown(p, b)
			return
		}
		if b.inflight.Load() == 0 || !b.leaving.Load() {
			s.teardown(p, b)
			return
		}
	}
}

// cutCalls cuts the exchanges with a call on b not over yet, and returns
// how many it cut: their failure paths answer the clients (a 503, or a
// stream's error event), and their connections to the workers close. Both
// calls of such an exchange are cut: one without the other is no answer.
// An exchange whose call on b is over is left alone: a stream whose
// prefill, now removed, has done its part goes on on its decode.
func (s *Server) cutCalls(b *Backend, err error) int {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	n := 0
	for _, x := range s.flight {
		if (x.decode.backend == b && !x.decode.Cancel.Over()) || (!x.single && x.prefill.backend == b && !x.prefill.Cancel.Over()) {
			x.decode.abort(err)
			x.prefill.abort(err)
			n++
		}
	}
	return n
}

// teardown ends removed b for good: its health target, load polls, idle
// connections and metric series go. A b taken back is left as it is.
func (s *Server) teardown(p *Pool, b *Backend) {
	s.membersMu.Lock()
	defer s.membersMu.Unlock()
	key := b.role + " " + b.addr
	if s.draining[key] != b {
		return // taken back
	}
	delete(s.draining, key)
	if b.probe >= 0 {
		s.checker.Remove(b.probe)
	}
	if p.loads != nil && s.polledBackend(b.addr) == nil {
		p.loads.Remove(b.addr)
	}
	if b.role == rolePrefill {
		s.unregister(b)
	}
	b.hc.CloseIdleConnections()
	for _, name := range b.series {
		s.ms.UnregisterMetric(name)
	}
	s.resizeConnBudget()
	b.log.Info().Msg("worker drained and gone")
}

// check has the health checker probe b, when checks run.
func (s *Server) check(b *Backend) {
	if s.checker != nil {
		b.probe = s.checker.Add(s.healthTarget(b))
	}
}

// joinWarm and leaveWarm keep the warm pairs of b, when warm-up is on.
func (s *Server) joinWarm(b *Backend) {
	if s.warm != nil {
		s.warm.join(b)
	}
}

func (s *Server) leaveWarm(b *Backend) {
	if s.warm != nil {
		s.warm.leave(b)
	}
}
