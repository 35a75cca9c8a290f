package lb

import (
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/health"
)

func testPool(policy string, n int) *Pool {
	p := &Pool{role: roleDecode, policy: policy}
	cfg := Config{PrefillPolicy: policy}
	cfg.setDefaults()
	p.setPolicy(&cfg, metrics.NewSet(), zerolog.Nop())
	for i := range n {
		addr := string(rune('a' + i))
		p.join(&Backend{role: roleDecode, addr: addr, url: "http://" + addr})
	}
	return p
}

func TestRoundRobinCycles(t *testing.T) {
	p := testPool(PolicyRoundRobin, 3)
	var got string
	for range 6 {
		got += p.pick(nil, -1, nil).addr
	}
	if got != "abcabc" {
		t.Fatalf("got %q; want abcabc", got)
	}
	p.backends()[1].health.Store(int32(health.Down))
	got = ""
	for range 4 {
		got += p.pick(nil, -1, nil).addr
	}
	// b is skipped: its turns go to the next backend.
	if got != "acca" {
		t.Fatalf("got %q with b down; want acca", got)
	}
}

func TestRandomReachesEveryBackend(t *testing.T) {
	for _, policy := range Policies() {
		p := testPool(policy, 4)
		seen := map[string]int{}
		for range 4000 {
			seen[p.pick(nil, -1, nil).addr]++
		}
		for _, b := range p.backends() {
			if n := seen[b.addr]; n < 600 {
				t.Fatalf("%s: %s picked %d times in 4000; want about 1000", policy, b.addr, n)
			}
		}
	}
}

func TestPowerOfTwoAvoidsTheBusy(t *testing.T) {
	p := testPool(PolicyPowerOfTwo, 2)
	p.backends()[0].inflight.Store(10)
	for range 100 {
		if b := p.pick(nil, -1, nil); b.addr != "b" {
			t.Fatalf("picked the busy backend %s", b.addr)
		}
	}
}

// With every backend down, pick returns nil: the caller answers 503 rather
// than send work to a worker known to be down.
func TestNothingAvailable(t *testing.T) {
	for _, policy := range Policies() {
		for _, n := range []int{1, 3} {
			p := testPool(policy, n)
			for _, b := range p.backends() {
				b.health.Store(int32(health.Down))
			}
			if b := p.pick(nil, -1, nil); b != nil {
				t.Fatalf("%s with %d down backends: picked %s", policy, n, b.addr)
			}
		}
	}
}

func TestParseWorkerURL(t *testing.T) {
	f := func(raw, addr, host string, tls bool) {
		t.Helper()
		w, err := parseWorkerURL(raw)
		if err != nil {
			t.Fatalf("%q: %s", raw, err)
		}
		if w.addr != addr || w.host != host || w.tls != tls {
			t.Fatalf("%q: got %+v; want addr %q host %q tls %v", raw, w, addr, host, tls)
		}
	}
	f("http://127.0.0.1:30000", "127.0.0.1:30000", "127.0.0.1", false)
	f("http://Prefill-0.svc:30000/", "Prefill-0.svc:30000", "Prefill-0.svc", false)
	f("https://p", "p:443", "p", true)
	f("http://p", "p:80", "p", false)
	f("10.0.0.1:30000", "10.0.0.1:30000", "10.0.0.1", false)
	f("http://[fe80::1]:30000", "[fe80::1]:30000", "fe80::1", false)

	bad := func(raw string) {
		t.Helper()
		if _, err := parseWorkerURL(raw); err == nil {
			t.Fatalf("%q: got no error", raw)
		}
	}
	bad("ftp://p:1")
	bad("http://:30000")
	bad("http://p:99999")
	// What pdlb would drop without a word.
	bad("http://p:1/?debug=1")
	bad("http://p:1#x")
	bad("http://user:secret@p:1")
	bad("http://p:1/v1")
}

func TestPickSkipsExcluded(t *testing.T) {
	for _, policy := range Policies() {
		p := testPool(policy, 3)
		exclude := []*Backend{p.backends()[0], p.backends()[2]}
		for range 20 {
			if b := p.pick(exclude, -1, nil); b != p.backends()[1] {
				t.Fatalf("%s: picked %v; want b, the only one not excluded", policy, b)
			}
		}
		if b := p.pick(p.backends(), -1, nil); b != nil {
			t.Fatalf("%s: picked %s with every backend excluded", policy, b.addr)
		}
	}
	if b := testPool(PolicyRandom, 0).pick(nil, -1, nil); b != nil {
		t.Fatalf("an empty pool picked %v", b)
	}
}

// A request that needs a DP rank goes only to backends that have it, or
// whose dp_size is unknown, by the pool's policy among them.
func TestPickOnlyWhereTheRankExists(t *testing.T) {
	for _, policy := range Policies() {
		p := testPool(policy, 4)
		for i, n := range []int32{1, 4, 2, 4} {
			p.backends()[i].dpSize.Store(n)
		}
		seen := map[string]int{}
		for range 400 {
			seen[p.pick(nil, 3, nil).addr]++
		}
		if seen["a"]+seen["c"] != 0 || seen["b"] == 0 || seen["d"] == 0 {
			t.Fatalf("%s: picked %v for rank 3; want b and d (dp 4) only", policy, seen)
		}
		if b := p.pick(nil, 4, nil); b != nil {
			t.Fatalf("%s: picked %s for rank 4, which no backend has", policy, b.addr)
		}
		p.backends()[2].dpSize.Store(0) // unknown: it may have the rank
		if b := p.pick([]*Backend{p.backends()[1], p.backends()[3]}, 3, nil); b != p.backends()[2] {
			t.Fatalf("%s: picked %v; want c, whose dp_size is unknown", policy, b)
		}
	}
	p := testPool(PolicyRoundRobin, 4)
	for i, n := range []int32{1, 2, 1, 2} {
		p.backends()[i].dpSize.Store(n)
	}
	var got string
	for range 4 {
		got += p.pick(nil, 1, nil).addr
	}
	// As for a backend that is down, a turn skipped goes to the next one.
	if got != "bbdd" {
		t.Fatalf("got %q for rank 1; want bbdd", got)
	}
}
