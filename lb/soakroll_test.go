package lb

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/bench/fake"
)

// TestSoakRoll is `make soak`'s third phase (PDLB_SOAK_ROLL=1;
// PDLB_SOAK_DURATION, default 1m): the soak's mixed traffic, DP-rank hints
// and decode-only requests added, while every worker named in DNS is
// rolled in turn, round after round: taken out of the answer, drained and
// removed by pdlb after RemoveAfter, stopped and started again at the same
// address (a restart), put back and found again (warmed again, for
// prefills and decodes). Planned changes lose nothing: unlike TestSoak's
// kills, no request may fail, be cut or hang (issue 23 §5). With
// PDLB_SOAK_TCP=1, pdlb reaches the workers over loopback TCP.
//
// It runs in real time on the in-memory network, not in a synctest bubble:
// a soak is a stress test of real goroutines interleaving under the race
// detector, and the DNS server answers on a real UDP socket.
func TestSoakRoll(t *testing.T) {
	if os.Getenv("PDLB_SOAK_ROLL") == "" {
		t.Skip("set PDLB_SOAK_ROLL=1 (make soak) to run the rolling soak test")
	}
	duration := time.Minute
	if d, err := time.ParseDuration(os.Getenv("PDLB_SOAK_DURATION")); err == nil {
		duration = d
	}
	z := newDNSZone(t)
	h := newHarness(t)
	h.tcpWorkers = os.Getenv("PDLB_SOAK_TCP") != ""
	deadline := time.Now().Add(duration)
	c, tally := rollUnderTraffic(t, h, z, rollLoad{clients: 16, tokenDelay: time.Millisecond},
		func(int) bool { return time.Now().Before(deadline) })
	c.report(fmt.Sprintf("rolling soak over %s", duration), tally)
}

// rollConfig is the pdlb of a rollCluster: every worker found in z, a
// worker missing from it removed after a second.
func rollConfig(z *dnsZone) Config {
	return Config{
		DNS: DNSConfig{
			Prefill: []string{"p.pdlb.test:30000"}, Decode: []string{"d.pdlb.test:30010"},
			Fallback: []string{"f.pdlb.test:30020"},
			Server:   z.addr, Refresh: 500 * time.Millisecond, RemoveAfter: time.Second,
		},
		RequestTimeout: 10 * time.Second,
		HealthCheck:    HealthCheckConfig{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond},
		Breaker:        BreakerConfig{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second},
	}
}

// rollLoad is the traffic of a roll: clients sending one request after
// the other, or one about every pace each; each token takes the workers
// tokenDelay.
type rollLoad struct {
	clients          int
	pace, tokenDelay time.Duration
}

// rollUnderTraffic starts a rollCluster named in z and pdlb in front of it
// on h, and once every worker has joined, rolls them in turn under load
// for as long as more(the number of rolls done) says. It returns once
// every request has ended and pdlb is idle.
func rollUnderTraffic(t *testing.T, h *harness, z *dnsZone, load rollLoad, more func(int) bool) (*rollCluster, *rollSoakTally) {
	t.Helper()
	c := newRollCluster(t, h, z, load.tokenDelay)
	cfg := rollConfig(z)
	srv := h.start(cfg)
	for _, w := range c.workers {
		waitFor(t, w.addr+" found in DNS and warm", func() bool { return c.joined(srv, w) })
	}
	tally := &rollSoakTally{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range load.clients {
		wg.Go(func() { tally.client(t, h, cfg.RequestTimeout+5*time.Second, load.pace, stop) })
	}
	// Also when a roll fails the test: no client outlives it.
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopClients)
	for n := 0; more(n); n++ {
		c.roll(srv, c.workers[n%len(c.workers)])
	}
	stopClients()
	// A prefill may outlive its decode by orphanPrefillGrace.
	waitIdleWithin(t, srv, orphanPrefillGrace+time.Second)
	return c, tally
}

// report logs what a roll under traffic did, "what: N requests (S
// streams): N complete, 0 errors (…), R rolls (…)", and fails the test
// on any request not complete, and unless every role was rolled and its
// restarted workers served.
func (c *rollCluster) report(what string, tally *rollSoakTally) {
	c.t.Helper()
	rolls := c.rolls()
	c.t.Logf("%s: %s, %d rolls (%d prefills, %d decodes, %d fallbacks)", what, tally.String(),
		rolls[rolePrefill]+rolls[roleDecode]+rolls[roleFallback], rolls[rolePrefill], rolls[roleDecode], rolls[roleFallback])
	for _, kind := range tally.errorKinds() {
		c.t.Logf("  %s", kind)
	}
	for _, role := range []string{rolePrefill, roleDecode, roleFallback} {
		if served := c.servedRestarted(role); rolls[role] == 0 || served == 0 {
			c.t.Errorf("%s workers: %d rolled, restarted ones served %d; want some of each", role, rolls[role], served)
		}
	}
	if n := tally.sent.Load(); n == 0 || tally.complete.Load() != n {
		c.t.Fatalf("%d requests, %d complete; want every one complete", n, tally.complete.Load())
	}
}

// rollSoakBodies are the soak's bodies, plus a request that names a prefill
// DP rank (it waits for its pair to be warm, so it meets re-added workers'
// warm-ups) and one asked to skip remote prefill (the fallback pool's).
var rollSoakBodies = append(soakBodies[:len(soakBodies):len(soakBodies)],
	soakBody{path: "/generate", body: `{"text": "soak", "sampling_params": {"max_new_tokens": 8}, "disagg_prefill_dp_rank": 1, "stream": true}`},
	soakBody{path: "/generate", body: `{"text": "soak", "sampling_params": {"max_new_tokens": 8}}`, pdMode: "decode-only"},
)

// rollSoakTally counts TestSoakRoll's requests: soakTally's counts, and
// the streams among them.
type rollSoakTally struct {
	soakTally
	streams atomic.Int64
	// reported bounds the answers the test log shows whole.
	reported atomic.Int32
}

func (tally *rollSoakTally) String() string {
	return fmt.Sprintf("%d requests (%d streams): %d complete, %d errors (%d clear, %d lost, %d hung)",
		tally.sent.Load(), tally.streams.Load(), tally.complete.Load(),
		tally.clearError.Load()+tally.lost.Load()+tally.hung.Load(),
		tally.clearError.Load(), tally.lost.Load(), tally.hung.Load())
}

// client sends rollSoakBodies in random order, one about every pace (0:
// one after the other), until stop closes, failing t on any answer that is
// not complete.
func (tally *rollSoakTally) client(t *testing.T, h *harness, timeout, pace time.Duration, stop <-chan struct{}) {
	for {
		var next <-chan time.Time // nil, never ready, without a pace
		if pace > 0 {
			next = time.After(pace/2 + rand.N(pace))
		}
		select {
		case <-stop:
			return
		default:
		}
		sb := rollSoakBodies[rand.IntN(len(rollSoakBodies))]
		r, kind, body := h.soakSend(sb, timeout)
		tally.add(r, kind)
		if sb.stream() {
			tally.streams.Add(1)
		}
		if r != soakComplete && tally.reported.Add(1) <= 10 {
			t.Errorf("%s %s (X-PD-Mode %q) during a roll: got %s %q; want it complete",
				sb.path, sb.body, sb.pdMode, []string{"complete", "a clear error", "lost", "hung"}[r], body)
		}
		if next != nil {
			select {
			case <-stop:
				return
			case <-next:
			}
		}
	}
}

// rollCluster is TestSoakRoll's workers: two prefills and two decodes with
// two DP ranks each, the decodes with SGLang's first-request bug, and two
// fallbacks, each named in DNS by its role's name, on in-memory addresses
// that the answers give.
type rollCluster struct {
	t       *testing.T
	h       *harness
	z       *dnsZone
	workers []*rollWorker
}

// rollWorker is one worker of a rollCluster: the fake now serving it,
// replaced on each restart, and what rolling it counted.
type rollWorker struct {
	role, name, ip, addr string
	cfg                  fake.Config
	srv                  *fake.Server
	out                  bool // out of the DNS answer
	// rolls counts its restarts; served, the generate requests its
	// restarted fakes served before their own restart.
	rolls  int
	served uint64
}

func newRollCluster(t *testing.T, h *harness, z *dnsZone, tokenDelay time.Duration) *rollCluster {
	t.Helper()
	c := &rollCluster{t: t, h: h, z: z}
	base := fake.Config{KVTimeout: 2 * time.Second, TokenDelay: tokenDelay, Tokens: 8,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	roles := []struct {
		role, name, net string
		port            int
		fake            fake.Role
		dp              int
	}{
		{rolePrefill, "p.pdlb.test", "10.0.1", 30000, fake.RolePrefill, 2},
		{roleDecode, "d.pdlb.test", "10.0.2", 30010, fake.RoleDecode, 2},
		{roleFallback, "f.pdlb.test", "10.0.3", 30020, fake.RoleAggregated, 1},
	}
	// Listed, and so rolled, one of each role in turn: a restarted
	// worker serves while the others of the round roll.
	for i := range 2 {
		for _, r := range roles {
			w := &rollWorker{role: r.role, name: r.name, ip: fmt.Sprintf("%s.%d", r.net, i+1), cfg: base}
			w.addr = fmt.Sprintf("%s:%d", w.ip, r.port)
			w.cfg.Role, w.cfg.DPSize = r.fake, r.dp
			// SGLang's decodes that fail a DP-hinted request until
			// warmed: a restarted decode is useless to those unwarmed.
			w.cfg.FirstRequestBug = r.fake == fake.RoleDecode
			c.workers = append(c.workers, w)
			c.start(w)
		}
	}
	for _, r := range roles {
		c.publish(r.name)
	}
	t.Cleanup(func() {
		for _, w := range c.workers {
			_ = w.srv.Close()
		}
	})
	return c
}

// start starts a fresh fake for w at its address.
func (c *rollCluster) start(w *rollWorker) {
	c.t.Helper()
	w.srv = fake.New(w.cfg)
	if err := w.srv.Start(c.h.nw, w.addr); err != nil {
		c.t.Fatalf("cannot start %s %s: %s", w.role, w.addr, err)
	}
}

// publish sets the answer for name: its workers that are not out.
func (c *rollCluster) publish(name string) {
	var ips []string
	for _, w := range c.workers {
		if w.name == name && !w.out {
			ips = append(ips, w.ip)
		}
	}
	c.z.set(name, ips...)
}

// roll takes w out of DNS, waits until srv has drained and removed it,
// restarts it, puts it back and waits until srv has it again, warm.
func (c *rollCluster) roll(srv *Server, w *rollWorker) {
	c.t.Helper()
	w.out = true
	c.publish(w.name)
	waitFor(c.t, w.addr+" drained and removed", func() bool { return c.gone(srv, w) })
	// Anything still in flight on the worker is aborted by the stop, and
	// its client counts it lost; this says where it came from.
	if n := w.srv.Stats().InFlight; n != 0 {
		c.t.Logf("%s %s stopped with %d requests in flight, after pdlb drained it", w.role, w.addr, n)
	}
	_ = w.srv.Close() // nothing of pdlb's is left on it to abort
	if w.rolls > 0 {
		w.served += w.srv.Stats().GenerateRequests
	}
	c.start(w)
	w.rolls++
	w.out = false
	c.publish(w.name)
	waitFor(c.t, w.addr+" found again and warm", func() bool { return c.joined(srv, w) })
}

// url is w's URL as srv's pools know it.
func (w *rollWorker) url() string { return "http://" + w.addr }

// gone reports whether srv has neither w as a member nor a drain of it.
func (c *rollCluster) gone(srv *Server, w *rollWorker) bool {
	if srv.pool(w.role).find(w.url()) != nil {
		return false
	}
	srv.membersMu.Lock()
	defer srv.membersMu.Unlock()
	return srv.draining[w.role+" "+workerAddr(w.url())] == nil
}

// joined reports whether w is a member of srv's pool with all its pairs
// warm (a prefill or a decode, with every member of the other pool).
func (c *rollCluster) joined(srv *Server, w *rollWorker) bool {
	b := srv.pool(w.role).find(w.url())
	if b == nil || b.role == roleFallback {
		return b != nil
	}
	others := srv.decodes
	if b.role == roleDecode {
		others = srv.prefills
	}
	pairs := srv.warm.pairsOf(b)
	if len(pairs) != len(others.backends()) {
		return false
	}
	for _, pr := range pairs {
		if !srv.warm.isWarm(pr) {
			return false
		}
	}
	return true
}

// rolls counts the restarts by role.
func (c *rollCluster) rolls() map[string]int {
	n := map[string]int{}
	for _, w := range c.workers {
		n[w.role] += w.rolls
	}
	return n
}

// servedRestarted is how many generate requests the restarted fakes of
// role served.
func (c *rollCluster) servedRestarted(role string) uint64 {
	var n uint64
	for _, w := range c.workers {
		if w.role == role && w.rolls > 0 {
			n += w.served + w.srv.Stats().GenerateRequests
		}
	}
	return n
}
