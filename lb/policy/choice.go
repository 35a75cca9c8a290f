package policy

// Reason says why a policy chose its worker: a closed set, so that it can
// label metrics (bounded values only) and the debug access line.
type Reason uint8

// The reasons a pick can give. Each policy uses a few of them; doc.go says
// which.
const (
	// ReasonNone: no usable worker; the pick's Worker is -1.
	ReasonNone Reason = iota
	// ReasonImbalance: cache_aware found the pool imbalanced and took the
	// least loaded worker.
	ReasonImbalance
	// ReasonPrefixMatch: cache_aware's longest prefix match was above the
	// cache threshold.
	ReasonPrefixMatch
	// ReasonSmallestTree: cache_aware's match was at or below the threshold,
	// so the worker holding the least text took the request.
	ReasonSmallestTree
	// ReasonHash: the key's owner on the ring took the request.
	ReasonHash
	// ReasonHashOverload: the key's owner on the ring was above the load
	// bound, so the next worker on the ring within it took the request.
	ReasonHashOverload
	// ReasonTargetWorker: the caller named the worker (X-SMG-Target-Worker).
	ReasonTargetWorker
	// ReasonStickyHit: manual found the key's worker and it was usable.
	ReasonStickyHit
	// ReasonStickyMoved: manual's worker for the key was not usable, so the
	// key moved to a new one.
	ReasonStickyMoved
	// ReasonNewKey: manual saw the key for the first time.
	ReasonNewKey
	// ReasonNoKey: the request carried no key, so the policy fell back
	// (random for consistent_hashing and manual, least loaded for
	// prefix_hash).
	ReasonNoKey
)

// reasonNames are the reasons' names, indexed by Reason. It is a constant
// array, never written.
var reasonNames = [...]string{
	ReasonNone:         "none",
	ReasonImbalance:    "imbalance",
	ReasonPrefixMatch:  "prefix_match",
	ReasonSmallestTree: "smallest_tree",
	ReasonHash:         "hash",
	ReasonHashOverload: "hash_overload",
	ReasonTargetWorker: "target_worker",
	ReasonStickyHit:    "sticky_hit",
	ReasonStickyMoved:  "sticky_moved",
	ReasonNewKey:       "new_key",
	ReasonNoKey:        "no_key",
}

// String returns the reason's name as metrics and logs show it.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	panic("BUG: unknown route.Reason")
}

// Reasons lists every reason, so that a caller can create its metrics once
// at startup. It returns a new slice on each call.
func Reasons() []Reason {
	rs := make([]Reason, len(reasonNames))
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Choice is a pick's result.
type Choice struct {
	// Worker is the chosen worker's index in the caller's pool, or -1 when
	// no worker was usable (Reason is then ReasonNone).
	Worker int
	// Reason says why Worker won.
	Reason Reason
	// MatchRatio is cache_aware's matched share of the key (0 to 1) for
	// ReasonPrefixMatch and ReasonSmallestTree, and 0 for the others.
	MatchRatio float64
}

// none is the choice when no worker is usable.
var none = Choice{Worker: -1, Reason: ReasonNone}

// Pool is the caller's view of one pool at the moment of a pick: entry i of
// each slice describes worker i. The policies only read it, and keep no
// reference to it after the pick returns.
type Pool struct {
	// Loads are the workers' requests in flight; len(Loads) is the pool's
	// size.
	Loads []int
	// Usable marks the workers a pick may choose (healthy, holding the
	// request's DP rank, ...). Nil means every worker is usable; otherwise
	// it has len(Loads) entries.
	Usable []bool
}

// usable reports whether worker w may be chosen.
func (p Pool) usable(w int) bool {
	return p.Usable == nil || p.Usable[w]
}

// stats returns the smallest and largest load among usable workers, their
// sum and how many there are.
func (p Pool) stats() (lo, hi, sum, n int) {
	for w, l := range p.Loads {
		if !p.usable(w) {
			continue
		}
		if n == 0 || l < lo {
			lo = l
		}
		if n == 0 || l > hi {
			hi = l
		}
		sum += l
		n++
	}
	return lo, hi, sum, n
}

// leastLoaded returns the usable worker with the fewest requests in
// flight, ties going to the lowest index, or -1 when none is usable.
func (p Pool) leastLoaded() int {
	best := -1
	for w, l := range p.Loads {
		if p.usable(w) && (best < 0 || l < p.Loads[best]) {
			best = w
		}
	}
	return best
}

// Unit is the width in bytes of one element of a key: a match never ends
// inside one.
type Unit int

const (
	// UnitByte is for text keys: any byte boundary may end a match.
	UnitByte Unit = 1
	// UnitToken is for token-id keys, each id encoded in 4 bytes (little
	// endian, as AppendTokens writes them).
	UnitToken Unit = 4
)

// unitIndex maps a unit to its slot in per-unit arrays.
func (u Unit) index() int {
	switch u {
	case UnitByte:
		return 0
	case UnitToken:
		return 1
	}
	panic("BUG: policy.Unit must be UnitByte or UnitToken")
}

// AppendTokens appends the token ids to dst, 4 bytes each (little endian),
// making a key of UnitToken.
func AppendTokens(dst []byte, ids []uint32) []byte {
	for _, id := range ids {
		dst = append(dst, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return dst
}
