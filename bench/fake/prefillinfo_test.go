package fake

import (
	"sync"
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
	var registered, started atomic.Bool
	// asked is closed when the prefill first reads its clock after Start:
	// it does so only to answer /route (after counting it), and nothing
	// but the decode's fetch asks it.
	asked := make(chan struct{})
	var askedOnce sync.Once
	base := newClock()
	now := func() time.Time {
		if registered.Load() {
			return base.now().Add(time.Hour)
		}
		if started.Load() {
			askedOnce.Do(func() { close(asked) })
		}
		return base.now()
	}
	n := NewNetwork()
	p := startServer(t, n, prefillAddr, Config{Role: RolePrefill, RegisterDelay: time.Minute, Now: now})
	started.Store(true)
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode, InfoRetries: 1000, InfoRetryInterval: time.Millisecond})

	// The first request fetches, and keeps fetching while the prefill is
	// not registered.
	first, _, err := send(n, "POST", decodeAddr, "/generate", pdBody(`"text":"hi"`, "prefill", "8998", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	within(t, asked, "the first request to fetch the prefill's info")
	if got := p.Stats().BootstrapRoute; got == 0 {
		t.Fatalf("got BootstrapRoute %d once the prefill was asked; want the fetch counted", got)
	}

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
	within(t, d.infoWaited(t, "prefill:8998"), "the second request to wait on the first's fetch")

	first.Close() // the first request is aborted, its fetch stopped
	registered.Store(true)
	got := within(t, answers, "the second request's answers")
	if got[0].status != 200 || got[1].status != 200 {
		t.Fatalf("got prefill %d, decode %d %s; want 200 200", got[0].status, got[1].status, got[1].body)
	}
}

// infoWaited returns the channel closed once a request waits on another's
// fetch of addr's info, on whichever DP rank of s has that fetch.
func (s *Server) infoWaited(t *testing.T, addr string) <-chan struct{} {
	t.Helper()
	for i := range s.infos {
		ic := &s.infos[i]
		ic.mu.RLock()
		e := ic.m[addr]
		ic.mu.RUnlock()
		if e != nil {
			return e.waited
		}
	}
	t.Fatalf("no fetch of %s's info on any DP rank", addr)
	return nil
}
