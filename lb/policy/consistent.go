package policy

import (
	"math/rand/v2"
	"strconv"
)

// ConsistentHash is the consistent_hashing policy (SMG
// policies/consistent_hashing.rs), in SMG's order:
//   - target, X-SMG-Target-Worker's value when the header is present,
//     names the worker by its index; when it is not a usable worker's index
//     the pick fails: Worker -1 with ReasonTargetWorker. SMG counts the
//     index in its list of available workers; here it is the pool's index,
//     which does not shift when another worker goes down.
//   - key, X-SMG-Routing-Key's value, goes to its owner on r among usable
//     workers (no load bound). When the header is missing, SMG takes the
//     first of Authorization, X-Forwarded-For and Cookie that is set: the
//     caller passes that instead.
//   - with neither, a usable worker at random (ReasonNoKey).
func ConsistentHash(r *Ring, target string, key []byte, p Pool) Choice {
	if target != "" {
		w, err := strconv.Atoi(target)
		if err != nil || w < 0 || w >= len(p.Loads) || !p.usable(w) {
			return Choice{Worker: -1, Reason: ReasonTargetWorker}
		}
		return Choice{Worker: w, Reason: ReasonTargetWorker}
	}
	if len(key) > 0 {
		if w := r.owner(Hash(key), p); w >= 0 {
			return Choice{Worker: w, Reason: ReasonHash}
		}
		return none
	}
	if w := p.random(); w >= 0 {
		return Choice{Worker: w, Reason: ReasonNoKey}
	}
	return none
}

// random returns a usable worker chosen uniformly, or -1.
func (p Pool) random() int {
	_, _, _, n := p.stats()
	if n == 0 {
		return -1
	}
	return p.nth(rand.IntN(n))
}

// nth returns the usable worker that has i usable workers before it.
func (p Pool) nth(i int) int {
	for w := range p.Loads {
		if p.usable(w) {
			if i == 0 {
				return w
			}
			i--
		}
	}
	panic("BUG: policy.Pool.nth beyond the usable workers")
}
