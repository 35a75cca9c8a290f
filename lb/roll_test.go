package lb

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// rollRequests bounds the requests of each client of TestReplicasRollOnDNS:
// more than the roll needs at one a second of the bubble's clock, so the
// clients stop when the roll is over, never before.
const rollRequests = 120

// Two pdlb replicas on the same prefill and the same decodes named by DNS
// take mixed traffic while the decodes roll: A leaves the answer (kept for
// RemoveAfter, then drained and removed), C joins, A comes back. Every
// request through either replica is answered whole, none hangs, and at the
// end both hold the same decodes, C having served (issue 23 §4, §5).
func TestReplicasRollOnDNS(t *testing.T) {
	z := newDNSZone(t)
	z.set("d.pdlb.test", "10.0.0.1", "10.0.0.2")
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		decodes := map[string]*fake.Server{}
		for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			decodes[ip] = h.fake(ip+":30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second,
				Tokens: 4, TokenDelay: 100 * time.Millisecond})
		}
		cfg := dnsDecodes(z, "d.pdlb.test:30010")
		a := h.start(cfg)
		time.Sleep(2 * time.Second) // bubble's clock: b refreshes 2 s after a
		b, _ := startReplica(t, h, cfg, "pdlb-b:8000")
		synctest.Wait()

		var tally rollTally
		stop := make(chan struct{})
		var clients sync.WaitGroup
		for i := range 6 {
			addr := []string{"pdlb:8000", "pdlb-b:8000"}[i%2]
			cl := &fasthttp.HostClient{Addr: addr, Dial: func(string) (net.Conn, error) { return h.nw.Dial(addr) }}
			t.Cleanup(cl.CloseIdleConnections)
			clients.Go(func() { tally.client(t, cl, i, stop) })
		}
		// Also when a check fails the test: no client outlives it.
		stopClients := sync.OnceFunc(func() { close(stop); clients.Wait() })
		t.Cleanup(stopClients)

		left, gone := rollDNS(t, z, cfg, a, b, decodes["10.0.0.1"])
		stopClients()

		want := []string{"http://10.0.0.1:30010", "http://10.0.0.2:30010", "http://10.0.0.3:30010"}
		if ga, gb := decodeURLs(a), decodeURLs(b); !slices.Equal(ga, want) || !slices.Equal(gb, want) {
			t.Errorf("after the roll: got replicas with decodes %q and %q; want %q", ga, gb, want)
		}
		served := map[string]uint64{}
		for ip, d := range decodes {
			served[ip] = d.Stats().GenerateRequests
		}
		t.Logf("roll: %d requests (%d streams) through two replicas; served by decode 10.0.0.1 %d "+
			"(%d before it left DNS, %d while missing, %d once back), 10.0.0.2 %d, 10.0.0.3 %d",
			tally.requests.Load(), tally.streams.Load(), served["10.0.0.1"], left, gone-left, served["10.0.0.1"]-gone,
			served["10.0.0.2"], served["10.0.0.3"])
		if tally.requests.Load() == 0 || served["10.0.0.3"] == 0 || served["10.0.0.1"] == gone {
			t.Errorf("the decode that joined served %d, the one back %d; want both some", served["10.0.0.3"], served["10.0.0.1"]-gone)
		}
	})
}

// Every worker named in DNS, prefills, decodes and fallbacks, is rolled
// once in turn under mixed traffic (streams, DP-rank hints, decode-only):
// taken out of the answer, drained and removed after RemoveAfter, stopped,
// started afresh at its address, put back and found again, warm. Every
// request is complete: TestSoakRoll's short form, on the bubble's clock
// (issue 23 §5).
func TestWorkersRollWithRestarts(t *testing.T) {
	z := newDNSZone(t)
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		// Requests of 160 ms, so that some are in flight on a worker
		// when it leaves; the clock is the bubble's.
		load := rollLoad{clients: 4, pace: 100 * time.Millisecond, tokenDelay: 20 * time.Millisecond}
		c, tally := rollUnderTraffic(t, h, z, load, func(n int) bool { return n < 6 })
		c.report("one round of rolls", tally)
	})
}

// rollDNS rolls the decodes of z's d.pdlb.test under replicas a and b,
// checking after each step that both hold what they should, and returns
// what decode A (10.0.0.1) had served when it left DNS and when it was
// removed. Each sleep is on the bubble's clock: one refresh of each
// replica, or RemoveAfter.
func rollDNS(t *testing.T, z *dnsZone, cfg Config, a, b *Server, decodeA *fake.Server) (left, gone uint64) {
	t.Helper()
	check := func(when string, want ...string) {
		t.Helper()
		synctest.Wait()
		if ga, gb := decodeURLs(a), decodeURLs(b); !slices.Equal(ga, want) || !slices.Equal(gb, want) {
			t.Fatalf("%s: got replicas with decodes %q and %q; want %q", when, ga, gb, want)
		}
	}
	const dA, dB, dC = "http://10.0.0.1:30010", "http://10.0.0.2:30010", "http://10.0.0.3:30010"
	time.Sleep(cfg.DNS.Refresh) // traffic on A and B
	check("before the roll", dA, dB)
	left = decodeA.Stats().GenerateRequests
	z.set("d.pdlb.test", "10.0.0.2")
	time.Sleep(cfg.DNS.Refresh)
	check("one refresh after A left DNS", dA, dB) // kept for RemoveAfter
	z.set("d.pdlb.test", "10.0.0.2", "10.0.0.3")
	time.Sleep(cfg.DNS.Refresh)
	check("one refresh after C joined DNS", dA, dB, dC)
	time.Sleep(cfg.DNS.RemoveAfter)
	check("RemoveAfter after A left DNS", dB, dC)
	gone = decodeA.Stats().GenerateRequests
	z.set("d.pdlb.test", "10.0.0.1", "10.0.0.2", "10.0.0.3")
	time.Sleep(cfg.DNS.Refresh)
	check("one refresh after A came back", dA, dB, dC)
	time.Sleep(cfg.DNS.Refresh) // traffic on all three
	return left, gone
}

// rollTally counts the requests of TestReplicasRollOnDNS's clients.
type rollTally struct {
	requests, streams atomic.Int64
}

// client sends through cl, one a second of the bubble's clock, until stop
// closes or rollRequests are sent, a /generate in turn whole and streamed,
// failing t on any answer not whole or not in time.
func (tally *rollTally) client(t *testing.T, cl *fasthttp.HostClient, id int, stop <-chan struct{}) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for n := range rollRequests {
		select {
		case <-stop:
			return
		default:
		}
		stream := (n+id)%2 == 1
		body := `{"text": "roll", "sampling_params": {"max_new_tokens": 4}}`
		if stream {
			body = `{"text": "roll", "stream": true, "sampling_params": {"max_new_tokens": 4}}`
		}
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://" + cl.Addr + "/generate")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
		if err := cl.DoTimeout(req, resp, 20*time.Second); err != nil {
			t.Errorf("client %d via %s, request %d: %s", id, cl.Addr, n, err)
			return
		}
		if r := classifyAnswer(resp.StatusCode(), resp.Body(), stream); r != soakComplete || resp.StatusCode() != fasthttp.StatusOK {
			t.Errorf("client %d via %s, request %d (stream %t): got %d %q; want it whole", id, cl.Addr, n, stream, resp.StatusCode(), resp.Body())
		}
		tally.requests.Add(1)
		if stream {
			tally.streams.Add(1)
		}
		time.Sleep(time.Second) // bubble's clock: the pace of a client
	}
	t.Errorf("client %d sent its %d requests before the roll was over", id, rollRequests)
}

// A request that names a DP rank waits for its pair's warm-up; when its
// prefill is removed meanwhile (a planned change) and drained, and its
// process stopped, the request goes through the prefill that remains,
// whole, instead of failing with the warm-up of a prefill gone.
func TestWarmWaitOutlivesItsPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{}) // holds the warm-up's token, so the pair stays cold
		p0 := h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill})
		p1 := h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill})
		h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, TokenGate: gate, Tokens: 2})
		srv := h.start(warmConfig())
		done := make(chan reply, 1)
		go func() {
			r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a", "disagg_prefill_dp_rank": 0}`)
			done <- r
		}()
		synctest.Wait() // the request waits for prefill-0's pair
		if _, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-1:30000", BootstrapPort: 8998}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		time.Sleep(drainPoll) // the bubble's clock: the drain looks
		settled(t, "prefill-0 drained", func() bool {
			srv.membersMu.Lock()
			defer srv.membersMu.Unlock()
			return len(srv.draining) == 0
		})
		_ = p0.Close() // the planned stop, once pdlb has drained it
		close(gate)
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Fatalf("a request waiting for its pair when its prefill left: got %d %s; want 200", r.status, r.body)
		}
		if got := p1.Stats().GenerateRequests; got == 0 {
			t.Error("the prefill that remained served nothing; want the request")
		}
	})
}

// A decode that joins is warmed with the ready prefills at once, before
// any request, as a prefill that joins is: a roll's decode comes back warm.
func TestDecodeAddedIsWarmedAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		d1 := h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})
		srv := h.start(warmConfig())
		settled(t, "the first pair warm", func() bool { return h.metric("pdlb_warm_pairs") == "1" })
		b, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010"}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		settled(t, "decode-1's pair warm, no request sent", func() bool {
			pairs := srv.warm.pairsOf(b)
			return len(pairs) == 1 && srv.warm.isWarm(pairs[0])
		})
		if got := d1.Stats().GenerateRequests; got != 1 {
			t.Errorf("decode-1 served %d requests; want its one warm-up", got)
		}
	})
}
