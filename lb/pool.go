package lb

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/lb/load"
	"pdlb/lb/policy"
)

// Pool is the set of backends of one role with the policy that picks among
// them. Its backends change at run time through the Server's membership
// path (membership.go): a pick reads one immutable snapshot of them. It is
// safe for concurrent use.
type Pool struct {
	role   string
	policy string
	// kind is policy resolved once, for the request path's switch.
	kind policyKind
	// members is the pool's current workers, replaced whole on every
	// change (copy on write) and read without a lock; never nil.
	members atomic.Pointer[members]
	// changeMu serialises changes of members.
	changeMu sync.Mutex
	// next is round_robin's position.
	next atomic.Uint32
	// cache holds cache_aware's prefix trees; hash is prefix_hash's
	// parameters (its ring is the members'), sticky manual's assignments.
	// Each is set under its policy only.
	cache  *policy.CacheAware
	hash   policy.PrefixHash
	sticky *policy.Manual
	// loads are the workers' own reports of their load, for the policies
	// that weigh loads; nil when the pool's policy does not.
	loads *load.Poller

	// ms holds the series of the pool's policy.
	ms *metrics.Set
	// now is the clock manual's keys age on (Config.Now).
	now func() time.Time
	log zerolog.Logger
	// decisions counts the picks of package policy's policies by why they
	// were made, by policy.Reason; nil under the other policies.
	decisions []*metrics.Counter
	// matchRatio is the share of cache_aware's keys its best match covered.
	matchRatio *metrics.Histogram
}

// pick returns a backend for a new request that needs DP rank rank (-1 for
// none), or nil when none is available. Unavailable backends are skipped,
// and so are those without the rank and those in exclude (the ones that
// already failed this request): the policy chooses among the others. When
// every backend is unavailable pick returns nil rather than guess (Caddy's
// choice), so the caller can answer 503 or fall back instead of sending work
// to a worker known to be down. q is the request, whose prompt and routing
// key steer the policies that follow them; nil for none.
func (p *Pool) pick(exclude []*Backend, rank int, q *clientRequest) *Backend {
	m := p.members.Load()
	bs := m.backends
	n := len(bs)
	if n == 0 {
		return nil
	}
	if p.kind >= kindRouted {
		return p.pickRouted(m, exclude, rank, q)
	}
	if n == 1 {
		if b := bs[0]; p.usable(b, exclude, rank) {
			return b
		}
		return nil
	}
	var start int
	switch p.kind {
	case kindRoundRobin:
		start = int(p.next.Add(1)-1) % n
	case kindLeastLoad:
		return p.pickLeastLoaded(bs, exclude, rank)
	case kindPowerOfTwo:
		if b := p.pickLessLoaded(bs, exclude, rank); b != nil {
			return b
		}
		fallthrough
	default:
		start = rand.IntN(n)
	}
	for i := range n {
		if b := bs[(start+i)%n]; p.usable(b, exclude, rank) {
			return b
		}
	}
	return nil
}

// backends returns p's current workers, in the order they joined. The
// slice is shared and immutable: never modify it.
func (p *Pool) backends() []*Backend { return p.members.Load().backends }

// anyAvailable reports whether a backend of p is in selection.
func (p *Pool) anyAvailable() bool {
	return slices.ContainsFunc(p.backends(), (*Backend).available)
}

// usable reports whether b, nil for an empty slot, may take a request.
func (p *Pool) usable(b *Backend, exclude []*Backend, rank int) bool {
	return b != nil && b.available() && b.takes(rank) && !slices.Contains(exclude, b)
}

// largestDPSize returns the largest dp_size among p's backends, and false
// when some backend's is unknown.
func (p *Pool) largestDPSize() (int, bool) {
	largest := 0
	for _, b := range p.backends() {
		n := int(b.dpSize.Load())
		if n == 0 {
			return 0, false
		}
		largest = max(largest, n)
	}
	return largest, true
}
