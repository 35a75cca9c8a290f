package fake

import (
	"sync/atomic"
	"testing"
	"time"
)

// A decode request that waits on another's fetch of the prefill's parallel
// info must not fail because that other request was aborted: the fetch was
// stopped for the aborted request alone. It failed pdlb's test of
// out-of-descriptor calls under load (a request pdlb cancelled took the next
// one's handshake with it).
func TestAbortedFetchIsNoAnswerForTheOthers(t *testing.T) {
	var registered atomic.Bool
	base := newClock()
	now := func() time.Time {
		if registered.Load() {
			return base.now().Add(time.Hour)
		}
		return base.now()
	}
	n := NewNetwork()
	p := startServer(t, n, prefillAddr, Config{Role: RolePrefill, RegisterDelay: time.Minute, Now: now})
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode, InfoRetries: 1000, InfoRetryInterval: time.Millisecond})

	// The first request fetches, and keeps fetching while the prefill is
	// not registered.
	first, _, err := send(n, "POST", decodeAddr, "/generate", pdBody(`"text":"hi"`, "prefill", "8998", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitUntil(t, "the first request to fetch the prefill's info", func() bool { return p.Stats().BootstrapRoute > 0 })

	// The second waits on the first's fetch.
	body := pdBody(`"text":"hi"`, "prefill", "8998", 2)
	answers := make(chan [2]result, 1)
	go func() {
		prefill := make(chan result, 1)
		go func() {
			pres, _ := roundTrip(n, "POST", prefillAddr, "/generate", body)
			prefill <- pres
		}()
		dres, _ := roundTrip(n, "POST", decodeAddr, "/generate", body)
		answers <- [2]result{<-prefill, dres}
	}()
	waitUntil(t, "the second request to wait on the first's fetch", func() bool { return d.infoWaiters("prefill:8998") > 0 })

	first.Close() // the first request is aborted, its fetch stopped
	registered.Store(true)
	got := within(t, answers, "the second request's answers")
	if got[0].status != 200 || got[1].status != 200 {
		t.Fatalf("got prefill %d, decode %d %s; want 200 200", got[0].status, got[1].status, got[1].body)
	}
}

// infoWaiters is how many requests waited on another's fetch of addr's
// info on any DP rank of s.
func (s *Server) infoWaiters(addr string) int {
	n := 0
	for i := range s.infos {
		ic := &s.infos[i]
		ic.mu.RLock()
		if e := ic.m[addr]; e != nil {
			n += int(e.waiters.Load())
		}
		ic.mu.RUnlock()
	}
	return n
}

// waitUntil polls cond until it holds, failing the test after testDeadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testDeadline); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
