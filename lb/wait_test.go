package lb

import (
	"testing"
	"time"
)

// waitFor waits until cond holds, failing t after 5 s: the one poll of lb's
// tests, for states no event announces (a fake worker's counters, a pair
// warm-up ending, pdlb letting a client go over a real socket). In a
// synctest bubble its ticks are the bubble's, and a test there prefers
// settled, which waits for every goroutine to block instead.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
