package policy

// PrefixHash is the prefix_hash policy's parameters (SMG
// policies/prefix_hash.rs, PrefixHashConfig). The policy keeps no state
// but the Ring, so every pdlb replica with the same workers sends a prefix
// to the same worker while loads stay within the bound.
type PrefixHash struct {
	// Tokens is how many leading tokens of the key are hashed (SMG's
	// prefix_token_count, 256). A token is 4 bytes: 4 bytes of a token-id
	// key, and for text, the 4 characters of English text an average BPE
	// token covers. SMG hashes token ids only and fails the pick when an
	// HTTP request has none.
	Tokens int
	// LoadFactor bounds the load: a worker with more in flight than
	// LoadFactor × (the usable workers' in-flight sum + 1) / their count is
	// passed over (SMG's load_factor, 1.25, and load_ok's +1 for the
	// request being placed).
	LoadFactor float64
}

// DefaultPrefixHash returns SMG's defaults.
func DefaultPrefixHash() PrefixHash {
	return PrefixHash{Tokens: 256, LoadFactor: 1.25}
}

// PrefixBytes returns the part of key that ph hashes.
func (ph PrefixHash) PrefixBytes(key []byte) []byte {
	return key[:min(len(key), ph.Tokens*4)]
}

// Pick chooses the worker of p that owns key's prefix on r, passing over
// workers above the load bound for the next distinct worker clockwise;
// when all are above it, the owner. SMG's code takes the least loaded
// worker within the bound instead of the next on the ring (its doc says it
// walks the ring); walking keeps an overflowing prefix on the same second
// worker, so its cache still helps. An empty key has no owner: the least
// loaded worker takes it (SMG fails the pick). Workers of p missing from
// r are never chosen.
func (ph PrefixHash) Pick(r *Ring, key []byte, p Pool) Choice {
	_, _, sum, n := p.stats()
	if n == 0 {
		return none
	}
	if len(key) == 0 {
		// Ties at random: one worker must not take every keyless
		// request of an idle pool.
		return Choice{Worker: p.randomMin(func(w int) int { return p.Loads[w] }), Reason: ReasonNoKey}
	}
	bound := ph.LoadFactor * float64(sum+1) / float64(n)
	first, chosen := -1, -1
	r.walk(Hash(ph.PrefixBytes(key)), func(w int) bool {
		if w >= len(p.Loads) || !p.usable(w) {
			return false
		}
		if first < 0 {
			first = w
		}
		if float64(p.Loads[w]) <= bound {
			chosen = w
			return true
		}
		return false
	})
	switch {
	case chosen >= 0 && chosen == first:
		return Choice{Worker: chosen, Reason: ReasonHash}
	case chosen >= 0:
		return Choice{Worker: chosen, Reason: ReasonHashOverload}
	case first >= 0:
		return Choice{Worker: first, Reason: ReasonHashOverload}
	}
	return none
}
