package lb

import "math/rand/v2"

// The policies that weigh loads (power_of_two, least_load, and the prefill
// DP policy least_inflight) read a worker's load as what pdlb has in flight
// on it now plus what others (other routers, other pdlb replicas) had
// there at its last report: its running and waiting requests (package load,
// polled every --worker-load-check-interval) less pdlb's own as the report
// came. A report is up to an interval old: taken alone, every pick between
// two polls would see the same numbers and herd onto one worker, and a
// request of pdlb's that was running at the poll would count until the
// next. A worker that reports nothing is weighed by pdlb's count alone.

// loadOf is b's load, as the policies weigh it.
func (p *Pool) loadOf(b *Backend) int64 {
	own := int64(b.inflight.Load())
	if p.loads == nil {
		return own
	}
	others, _ := p.loads.Get(b.addr).Others() // 0 when unknown
	return own + others
}

// pickLessLoaded draws two distinct backends and returns the one with the
// lower load, or nil if neither is usable.
func (p *Pool) pickLessLoaded(bs, exclude []*Backend, rank int) *Backend {
	n := len(bs)
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i {
		j++
	}
	a, b := bs[i], bs[j]
	switch {
	case !p.usable(a, exclude, rank):
		if p.usable(b, exclude, rank) {
			return b
		}
		return nil
	case !p.usable(b, exclude, rank):
		return a
	case p.loadOf(b) < p.loadOf(a):
		return b
	default:
		return a
	}
}

// pickLeastLoaded returns the usable backend with the lowest load, the
// first of them from a random start when several tie, or nil if none is
// usable.
func (p *Pool) pickLeastLoaded(bs, exclude []*Backend, rank int) *Backend {
	n := len(bs)
	start := rand.IntN(n)
	var best *Backend
	var bestLoad int64
	for i := range n {
		b := bs[(start+i)%n]
		if !p.usable(b, exclude, rank) {
			continue
		}
		if l := p.loadOf(b); best == nil || l < bestLoad {
			best, bestLoad = b, l
		}
	}
	return best
}

// rankLoadOf is the load of prefill p's DP rank r, as least_inflight
// weighs it: pdlb's requests in flight on it now (own) plus what others
// had there at its last report.
func (s *Server) rankLoadOf(p *Backend, r int, own int64) int64 {
	if s.loads == nil {
		return own
	}
	others, _ := s.loads.Get(p.addr).RankOthers(r) // 0 when unknown
	return own + others
}

// ownInflight is pdlb's requests in flight on b, on its DP rank rank (as
// --prefill-dp-policy placed them), or on all of it for rank -1.
func (b *Backend) ownInflight(rank int) int64 {
	if rank < 0 {
		return int64(b.inflight.Load())
	}
	if l := b.ranks.Load(); l != nil && rank < len(l.inflight) {
		return int64(l.inflight[rank].Load())
	}
	return 0
}
