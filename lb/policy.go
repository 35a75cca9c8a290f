package lb

import (
	"fmt"
	"slices"
	"strings"
)

// Policies a pool can select backends with.
const (
	// PolicyRandom picks a backend uniformly at random, as mini_lb does.
	PolicyRandom = "random"
	// PolicyRoundRobin cycles through the backends in order.
	PolicyRoundRobin = "round_robin"
	// PolicyPowerOfTwo picks the less loaded of two random backends
	// (pickload.go: their reported loads and pdlb's requests in flight).
	PolicyPowerOfTwo = "power_of_two"
	// PolicyLeastLoad picks the least loaded backend, loads as
	// power_of_two weighs them.
	PolicyLeastLoad = "least_load"
	// PolicyCacheAware follows an approximate prefix tree of what each
	// backend was sent, as sglang_router's cache_aware (package route).
	PolicyCacheAware = "cache_aware"
	// PolicyPrefixHash hashes the prompt's first tokens onto a ring of the
	// backends, with a bound on load: the same prefix goes to the same
	// backend from every pdlb replica.
	PolicyPrefixHash = "prefix_hash"
	// PolicyConsistentHashing and PolicyManual route by the client's
	// X-SMG-Routing-Key, for session affinity: on a hash ring, and by a
	// remembered assignment, as sglang_router's.
	PolicyConsistentHashing = "consistent_hashing"
	PolicyManual            = "manual"
)

// Prefill DP-rank policies (--prefill-dp-policy).
const (
	// DPPolicyOff leaves DP ranks to the client and the workers, as mini_lb.
	DPPolicyOff = "off"
	// DPPolicyRoundRobin cycles through a prefill's DP ranks.
	DPPolicyRoundRobin = "round_robin"
	// DPPolicyLeastInflight picks the prefill DP rank with the fewest of
	// pdlb's requests in flight.
	DPPolicyLeastInflight = "least_inflight"
)

// Policies lists the selection policies pdlb implements: the one list of
// their names. It returns a new slice on each call, so that no caller can
// change the set another one sees (issue 21: no package-level mutable
// state).
func Policies() []string {
	return []string{PolicyRandom, PolicyRoundRobin, PolicyPowerOfTwo, PolicyLeastLoad,
		PolicyCacheAware, PolicyPrefixHash, PolicyConsistentHashing, PolicyManual}
}

// DPPolicies lists the prefill DP-rank policies: the one list of their
// names, which the serve command's --prefill-dp-policy takes as its enum.
// Like Policies, it returns a new slice on each call.
func DPPolicies() []string {
	return []string{DPPolicyOff, DPPolicyRoundRobin, DPPolicyLeastInflight}
}

// CheckPolicy refuses p unless it is one of Policies: the one check of a
// policy's name, which Config's validation and the serve command's share.
func CheckPolicy(p string) error {
	if names := Policies(); !slices.Contains(names, p) {
		return fmt.Errorf("unknown policy %q; want one of %s", p, strings.Join(names, ", "))
	}
	return nil
}

// checkDPPolicy refuses p unless it is one of DPPolicies. The serve
// command needs no call of its own: kong refuses any other value of
// --prefill-dp-policy by its enum, built from DPPolicies.
func checkDPPolicy(p string) error {
	if names := DPPolicies(); !slices.Contains(names, p) {
		return fmt.Errorf("unknown prefill DP policy %q; want one of %v", p, names)
	}
	return nil
}

// policyKind is a policy's name resolved once, so that the request path
// switches on a small integer. The kinds from kindRouted on are package
// policy's, which weigh the request itself: its prompt, or its routing key.
type policyKind uint8

const (
	kindRandom policyKind = iota
	kindRoundRobin
	kindPowerOfTwo
	kindLeastLoad
	kindRouted // the policies below route by the request
	kindCacheAware
	kindPrefixHash
	kindConsistentHashing
	kindManual
)

// kindOf resolves a policy's name, one of Policies().
func kindOf(name string) policyKind {
	switch name {
	case PolicyRoundRobin:
		return kindRoundRobin
	case PolicyPowerOfTwo:
		return kindPowerOfTwo
	case PolicyLeastLoad:
		return kindLeastLoad
	case PolicyCacheAware:
		return kindCacheAware
	case PolicyPrefixHash:
		return kindPrefixHash
	case PolicyConsistentHashing:
		return kindConsistentHashing
	case PolicyManual:
		return kindManual
	}
	return kindRandom
}

// weighsLoads reports whether the policy reads the workers' reported loads.
func (k policyKind) weighsLoads() bool {
	return k == kindPowerOfTwo || k == kindLeastLoad
}
