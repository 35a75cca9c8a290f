package lb

import (
	"pdlb/lb/policy"
)

// headerRoutingKey is sglang_router's session key, which consistent_hashing
// and manual route by; headerTargetWorker names the worker outright.
var (
	headerRoutingKey   = []byte("X-SMG-Routing-Key")
	headerTargetWorker = []byte("X-SMG-Target-Worker")
)

// maxStackPool is the pool size up to which a pick's view of the pool
// lives on the stack.
const maxStackPool = 32

// pickRouted picks with one of package policy's policies, which weigh the
// request q (nil for none) and each backend's requests in flight. Usable
// backends are as pick says.
func (p *Pool) pickRouted(m *members, exclude []*Backend, rank int, q *clientRequest) *Backend {
	var loadBuf [maxStackPool]int
	var usableBuf [maxStackPool]bool
	loads, usable := loadBuf[:0], usableBuf[:0]
	for _, b := range m.slots {
		loads = append(loads, p.routedLoad(b))
		usable = append(usable, p.usable(b, exclude, rank))
	}
	view := policy.Pool{Loads: loads, Usable: usable}
	var ch policy.Choice
	switch p.kind {
	case kindCacheAware:
		ch = p.cache.Pick(q.prompt(), policy.UnitByte, view)
		if ch.Reason == policy.ReasonPrefixMatch || ch.Reason == policy.ReasonSmallestTree {
			p.matchRatio.Update(ch.MatchRatio)
		}
	case kindPrefixHash:
		ch = p.hash.Pick(m.ring, q.prompt(), view)
	default:
		ch = p.pickByKey(m.ring, q, view)
	}
	p.decisions[ch.Reason].Inc()
	if ch.Worker < 0 {
		return nil
	}
	b := m.slots[ch.Worker]
	if q != nil {
		p.log.Debug().Bytes("request_id", q.id).Str("role", p.role).Str("backend", b.addr).
			Str("policy", p.policy).Stringer("reason", ch.Reason).Float64("match_ratio", ch.MatchRatio).Msg("routed")
	}
	return b
}

// prompt is q's routing key: its prompt, as package bootstrap finds it;
// nil without a request.
func (q *clientRequest) prompt() []byte {
	if q == nil {
		return nil
	}
	return q.info.RoutingKey.Of(q.body)
}

// header returns q's header name, nil when absent or without a request.
func (q *clientRequest) header(name []byte) []byte {
	if q == nil {
		return nil
	}
	return q.ctx.Request.Header.PeekBytes(name)
}

// pickByKey picks with consistent_hashing or manual, by q's routing key:
// X-SMG-Routing-Key, or for consistent_hashing, as sglang_router, the first
// of Authorization, X-Forwarded-For and Cookie a request without it sends.
// X-SMG-Target-Worker names a consistent_hashing worker outright.
func (p *Pool) pickByKey(ring *policy.Ring, q *clientRequest, view policy.Pool) policy.Choice {
	key := q.header(headerRoutingKey)
	if p.kind == kindManual {
		return p.sticky.Pick(string(key), p.now(), view)
	}
	for _, h := range sessionHeaders {
		if len(key) > 0 {
			break
		}
		key = q.header(h)
	}
	return policy.ConsistentHash(ring, string(q.header(headerTargetWorker)), key, view)
}

// sessionHeaders stand for a routing key a request lacks, in order.
var sessionHeaders = [][]byte{[]byte("Authorization"), []byte("X-Forwarded-For"), []byte("Cookie")}

// routedLoad is b's load as the pool's policy weighs it: its requests in
// flight; for prefix_hash, averaged over about a second (smoothLoads). Its
// bound passes a worker over when its load is 1.25 times the pool's mean:
// with tens of requests in flight, the instantaneous count of a worker
// that is not overloaded is above that a fifth of the time by chance,
// and each such pick would send the prefix to a worker that lacks it (and
// evict another prefix there). The mean still moves within a second when
// a worker is overloaded for real.
func (p *Pool) routedLoad(b *Backend) int {
	if b == nil { // an empty slot, never usable
		return 0
	}
	if p.kind == kindPrefixHash {
		return int((b.meanInflight.Load() + 500) / 1000)
	}
	return int(b.inflight.Load())
}
