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
	// PolicyPowerOfTwo picks the less busy of two random backends, by
	// requests in flight from this pdlb.
	PolicyPowerOfTwo = "power_of_two"
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
	return []string{PolicyRandom, PolicyRoundRobin, PolicyPowerOfTwo}
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
