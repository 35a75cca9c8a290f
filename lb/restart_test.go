package lb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb/wire"
)

func TestRestartSigns(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &wire.UnreachableError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
	}
	f := func(err error, call, probe bool) {
		t.Helper()
		if got := callSaysRestart(err); got != call {
			t.Errorf("callSaysRestart(%v) got %t; want %t", err, got, call)
		}
		if got := probeSaysRestart(err); got != probe {
			t.Errorf("probeSaysRestart(%v) got %t; want %t", err, got, probe)
		}
	}
	f(nil, false, false)
	// The worker is gone, or dropped the connection: it may have restarted.
	f(dial(syscall.ECONNREFUSED), true, true)
	f(fmt.Errorf("cannot GET /health: %w", dial(syscall.ECONNREFUSED)), true, true)
	f(dial(syscall.EHOSTUNREACH), true, true)
	f(syscall.ECONNRESET, true, true)
	f(io.EOF, true, true)
	f(io.ErrUnexpectedEOF, true, true)
	f(fmt.Errorf("%w: %w", wire.ErrStaleConn, io.EOF), true, true)
	// A probe that the worker answered with another status than 200: SGLang
	// answers 503 while it starts.
	f(errors.New("GET /health returned status 503; want 200"), false, true)
	// A slow worker is alive, and so are its caches.
	f(fasthttp.ErrTimeout, false, false)
	f(fmt.Errorf("cannot GET /health: %w", fasthttp.ErrTimeout), false, false)
	f(&wire.UnreachableError{Err: fasthttp.ErrDialTimeout}, false, false)
	// pdlb's own shortages, and its own limit: the worker was never asked.
	f(dial(syscall.EMFILE), false, false)
	f(dial(syscall.EADDRNOTAVAIL), false, false) // no local port left
	f(fmt.Errorf("cannot GET /health: %w", dial(syscall.EADDRNOTAVAIL)), false, false)
	f(errNoBodyMemory, false, false)
	f(fasthttp.ErrNoFreeConns, false, false)
	f(fmt.Errorf("cannot GET /health: %w", fasthttp.ErrNoFreeConns), false, false)
	// The worker answered, and pdlb refused the answer.
	f(fasthttp.ErrBodyTooLarge, false, false)
	f(fmt.Errorf("cannot GET /health: %w", fasthttp.ErrBodyTooLarge), false, false)
	// Why a relayed stream broke off (call.broke): a dropped connection is
	// a sign; a stream that ended whole but without [DONE], or in broken
	// framing, is an answer; one silent for --stream-idle-timeout-secs is
	// a slow worker.
	broke := func(err error, want bool) {
		t.Helper()
		if got := callSaysRestart(err); got != want {
			t.Errorf("callSaysRestart(%v) got %t; want %t", err, got, want)
		}
	}
	broke(fmt.Errorf("the stream broke off: %w", io.ErrUnexpectedEOF), true)
	broke(fmt.Errorf("the stream broke off before its first event: %w", syscall.ECONNRESET), true)
	broke(errNoDone, false)
	broke(fmt.Errorf("the stream broke off: %w", wire.ErrBrokenChunk), false)
	broke(fmt.Errorf("the stream broke off: %w", fasthttp.ErrTimeout), false)
}

// restartConfig is warmConfig with active health checks of the default
// thresholds (Fall 3) that only the test runs (checkOnce), and no
// background refresh: only a probe, or a request, can warm a pair again.
func restartConfig() Config {
	cfg := warmConfig()
	cfg.BootstrapRefresh = time.Hour
	cfg.HealthCheck = HealthCheckConfig{Interval: time.Hour, Timeout: time.Second, Rise: 2, Fall: 3}
	return cfg
}

// warmPair starts pdlb with cfg in front of dpPair and returns the pair
// once it is warm, with the decode taken as up.
func (h *harness) warmPair(t *testing.T, cfg Config) (*Server, *pair) {
	t.Helper()
	h.dpPair()
	return h.startWarm(t, cfg)
}

// startWarm starts pdlb with cfg in front of the pair the test started,
// and returns that pair once it is warm, with its workers taken as up.
func (h *harness) startWarm(t *testing.T, cfg Config) (*Server, *pair) {
	t.Helper()
	srv := h.start(cfg)
	h.waitBootstrap()
	if srv.checker != nil {
		srv.checkOnce(5 * time.Second) // after the first round, the workers are up
	}
	pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
	waitFor(t, "the pair to be warm", func() bool { return srv.warm.isWarm(pr) })
	return srv, pr
}

// A failed probe under the Fall threshold makes the decode's pairs cold,
// unless it timed out; the first probe it answers after warms them again,
// with no request asking (issue 20). A refused decode fails its first probe
// on the connection it closed, the next on a refused dial: each is a sign.
func TestFailedProbeMakesPairsCold(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	tests := []struct {
		name     string
		fault    fake.Fault
		probes   int
		wantCold bool
		wantErr  string // in the last probe's error
		timeout  time.Duration
	}{
		{name: "refused", fault: fake.Fault{Kind: fake.FaultRefuse}, probes: 2, wantCold: true, wantErr: "connection refused"},
		{name: "503", fault: fake.Fault{Kind: fake.FaultError, Status: fasthttp.StatusServiceUnavailable, Health: true}, probes: 1, wantCold: true, wantErr: "status 503"},
		{name: "timeout", fault: fake.Fault{Kind: fake.FaultHang, Health: true}, probes: 1, wantCold: false, wantErr: "timeout", timeout: 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := restartConfig()
			if tt.timeout > 0 {
				cfg.HealthCheck.Timeout = tt.timeout
			}
			srv, pr := h.warmPair(t, cfg)
			d := srv.decodes.backends()[0]
			if err := h.decode.SetFault(tt.fault); err != nil {
				t.Fatal(err)
			}
			for i := range tt.probes {
				epoch := d.epoch.Load()
				srv.checkOnce(5 * time.Second)
				if !d.available() {
					t.Fatalf("probe %d took the decode out; Fall is 3", i+1)
				}
				if moved := d.epoch.Load() != epoch; moved != tt.wantCold {
					t.Fatalf("probe %d (%s) moved the decode's epoch: %t; want %t", i+1, srv.probeError(d), moved, tt.wantCold)
				}
				if cold := !srv.warm.isWarm(pr); cold != tt.wantCold {
					t.Fatalf("after probe %d (%s) the pair is cold: %t; want %t", i+1, srv.probeError(d), cold, tt.wantCold)
				}
			}
			if e := srv.probeError(d); !strings.Contains(e, tt.wantErr) {
				t.Fatalf("the last probe failed with %q; want %q in it", e, tt.wantErr)
			}
			if err := h.decode.SetFault(fake.Fault{}); err != nil {
				t.Fatal(err)
			}
			srv.checkOnce(5 * time.Second)
			waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
		})
	}
}

// A call the decode refuses makes its pairs cold; a call pdlb could not
// dial for want of descriptors does not.
func TestRefusedCallMakesPairsCold(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EMFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				var fail atomic.Bool
				h.dialFault = func(addr string) error {
					if fail.Load() && addr == "decode-0:30010" {
						return &net.OpError{Op: "dial", Net: "memory", Err: os.NewSyscallError("connect", errno)}
					}
					return nil
				}
				cfg := warmConfig()
				cfg.BootstrapRefresh = time.Hour
				cfg.DisableRetries = true
				srv, pr := h.warmPair(t, cfg)
				srv.decodes.backends()[0].hc.CloseIdleConnections() // so that the next call dials
				fail.Store(true)
				if r := h.post("/generate", `{"text": "a"}`); r.status == fasthttp.StatusOK {
					t.Fatalf("got %d %s; want the dial's failure", r.status, r.body)
				}
				if cold, want := !srv.warm.isWarm(pr), errno == syscall.ECONNREFUSED; cold != want {
					t.Fatalf("the pair is cold: %t; want %t", cold, want)
				}
			})
		})
	}
}

// A decode restarted faster than its health checks notice (two failed
// probes, under Fall) came back with an empty prefill-info cache while pdlb
// kept its pair warm: the next request carrying disagg_prefill_dp_rank hit
// SGLang's first-request bug ("is healthy before, but now it is down"), and
// succeeded only on the retry, after the prefill had worked for nothing
// (issue 20). Now no such request reaches the decode before the pair is
// warm again: whether the warm-up started when the decode answered a probe,
// or a request found the pair cold and waited for it.
func TestDecodeRestartUnderTheFallThreshold(t *testing.T) {
	for _, probedBack := range []bool{true, false} {
		t.Run(fmt.Sprintf("probed back %t", probedBack), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				srv, pr := h.warmPair(t, restartConfig())
				d := srv.decodes.backends()[0]
				// Requests leave pooled connections to the decode, which die
				// with it.
				for range 4 {
					if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
						t.Fatalf("before the restart: got %d %s", r.status, r.body)
					}
				}
				if err := h.decode.Close(); err != nil {
					t.Fatal(err)
				}
				for i := range 2 {
					srv.checkOnce(5 * time.Second)
					if !d.available() {
						t.Fatalf("failed probe %d took the decode out; Fall is 3", i+1)
					}
					if srv.warm.isWarm(pr) {
						t.Fatalf("after failed probe %d the pair is warm; want it cold", i+1)
					}
				}
				h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true, KVTimeout: 5 * time.Second})
				if probedBack {
					srv.checkOnce(5 * time.Second)
					waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
					// One warm-up generation per decode DP rank, unasked.
					if n := h.decode.Stats().GenerateRequests; n != 4 {
						t.Fatalf("the restarted decode served %d generations before any request; want 4 warm-ups", n)
					}
				}
				for i := range 4 {
					body := seedRequest
					if i%2 == 1 {
						body = strings.Replace(body, `"disagg_prefill_dp_rank": 0`, `"disagg_prefill_dp_rank": 3`, 1)
					}
					if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
						t.Fatalf("request %d after the restart: got %d %s", i, r.status, r.body)
					}
				}
				if n := h.decode.Stats().FirstRequestFailures; n != 0 {
					t.Errorf("%d requests reached the restarted decode with a DP-rank hint before it was warm", n)
				}
				for _, m := range []string{"pdlb_cold_pair_retries_total", "pdlb_retries_total"} {
					if got := h.metric(m); got != "0" {
						t.Errorf("%s is %s; want 0: no request needed a retry", m, got)
					}
				}
			})
		})
	}
}

// A prefill that restarts is forgotten by the decodes once their
// heartbeats to its bootstrap server fail twice, and their pairs are cold
// again. The registry sees such an outage when one of its reads falls in
// it, and gives the prefill a new generation; a failed probe of the
// prefill now has it read at once, so that a BootstrapRefresh longer than
// the outage does not miss it.
func TestPrefillRestartSeenByItsProbe(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{DPSize: 4, Tokens: 4},
			fake.Config{DPSize: 4, Tokens: 4, FirstRequestBug: true, HeartbeatInterval: 10 * time.Millisecond})
		srv, pr := h.startWarm(t, restartConfig()) // the registry reads once an hour
		if err := p.SetBootstrapDown(true); err != nil {
			t.Fatal(err)
		}
		if err := p.SetFault(fake.Fault{Kind: fake.FaultRefuse}); err != nil {
			t.Fatal(err)
		}
		// Each of the decode's four DP ranks cached the prefill's info when
		// the pair was warmed, and forgets it now.
		waitFor(t, "the decode to forget the prefill", func() bool { return h.decode.Stats().PrefillInfoDrops == 4 })
		srv.checkOnce(5 * time.Second)
		waitFor(t, "the registry to see the bootstrap server down", func() bool { return !srv.registry.State(0).Ready })
		if srv.warm.isWarm(pr) {
			t.Fatal("the pair is warm while its prefill's bootstrap server is down")
		}
		if err := p.SetFault(fake.Fault{}); err != nil {
			t.Fatal(err)
		}
		if err := p.SetBootstrapDown(false); err != nil {
			t.Fatal(err)
		}
		srv.checkOnce(5 * time.Second)
		waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
		for i := range 4 {
			if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
				t.Fatalf("request %d after the restart: got %d %s", i, r.status, r.body)
			}
		}
		if n := h.decode.Stats().FirstRequestFailures; n != 0 {
			t.Errorf("%d requests reached the decode with a DP-rank hint before it knew the prefill again", n)
		}
		if got := h.metric("pdlb_cold_pair_retries_total"); got != "0" {
			t.Errorf("pdlb_cold_pair_retries_total is %s; want 0", got)
		}
	})
}

// A decode that drops the connection in the middle of a relayed stream may
// have restarted, as one that drops it before answering may: its pairs go
// cold, and the first probe it answers after warms them (issue 20; the
// stream's failure was kept apart from the call's error, and was no
// sign). A stream that pdlb ends itself is none: a decode silent for
// --stream-idle-timeout-secs is slow, not restarted, and a client that
// left says nothing of the decode.
func TestStreamDroppedByTheDecodeMakesPairsCold(t *testing.T) {
	tests := []struct {
		name     string
		fault    fake.Fault
		idle     time.Duration // Config.StreamIdleTimeout, 0 for the default
		leave    bool          // the client closes its connection after the first event
		wantEnd  string        // in the error event that ends the stream
		wantCold bool
	}{
		{name: "dropped", fault: fake.Fault{Kind: fake.FaultCut, Events: 2}, wantEnd: "closed the connection in the middle of the stream", wantCold: true},
		{name: "silent", fault: fake.Fault{Kind: fake.FaultStall, Events: 2}, idle: 200 * time.Millisecond, wantEnd: "sent no event within"},
		{name: "client gone", fault: fake.Fault{Kind: fake.FaultStall, Events: 2}, leave: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				cfg := restartConfig()
				cfg.StreamIdleTimeout = tt.idle
				srv, pr := h.warmPair(t, cfg)
				d := srv.decodes.backends()[0]
				epoch := d.epoch.Load()
				if err := h.decode.SetFault(tt.fault); err != nil {
					t.Fatal(err)
				}
				s := h.openStream("/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 100000}}`)
				if s.status != fasthttp.StatusOK {
					t.Fatalf("got status %d; want 200", s.status)
				}
				s.next()
				if tt.leave {
					_ = s.conn.Close()
					// The stream goes on, and pdlb finds the client gone.
					if err := h.decode.SetFault(fake.Fault{}); err != nil {
						t.Fatal(err)
					}
				} else if rest := strings.Join(s.rest(), ""); !strings.Contains(rest, tt.wantEnd) {
					t.Fatalf("the stream ended with %q; want an error event saying %q", rest, tt.wantEnd)
				}
				waitIdle(t, srv)
				if got, want := h.metric(`pdlb_request_errors_total{reason="client_gone"}`) == "1", tt.leave; got != want {
					t.Fatalf("the client was seen gone: %t; want %t", got, want)
				}
				if moved := d.epoch.Load() != epoch; moved != tt.wantCold {
					t.Fatalf("the decode's epoch moved: %t; want %t", moved, tt.wantCold)
				}
				if cold := !srv.warm.isWarm(pr); cold != tt.wantCold {
					t.Fatalf("the pair is cold: %t; want %t", cold, tt.wantCold)
				}
				if !tt.wantCold {
					return
				}
				if err := h.decode.SetFault(fake.Fault{}); err != nil {
					t.Fatal(err)
				}
				srv.checkOnce(5 * time.Second)
				waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
			})
		})
	}
}

// A decode that went down through timeouts, which are no sign of a
// restart, may still have restarted while it was down: the probe that
// brings it back makes its pairs cold and warms them at once, not at
// keepWarm's next round, long after (issue 20).
func TestDecodeBackFromDownIsWarmedAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		cfg := restartConfig()
		cfg.HealthCheck.Timeout = 250 * time.Millisecond
		cfg.HealthCheck.Fall, cfg.HealthCheck.Rise = 1, 1
		srv, pr := h.warmPair(t, cfg)
		d := srv.decodes.backends()[0]
		if err := h.decode.SetFault(fake.Fault{Kind: fake.FaultHang, Health: true}); err != nil {
			t.Fatal(err)
		}
		srv.checkOnce(5 * time.Second)
		if d.available() {
			t.Fatalf("the decode is in selection after a probe that failed with %q; Fall is 1", srv.probeError(d))
		}
		if !srv.warm.isWarm(pr) {
			t.Fatal("a probe that timed out made the pair cold")
		}
		epoch := d.epoch.Load()
		if err := h.decode.SetFault(fake.Fault{}); err != nil {
			t.Fatal(err)
		}
		srv.checkOnce(5 * time.Second)
		if !d.available() {
			t.Fatalf("the decode is out of selection after a probe it answered (%q); Rise is 1", srv.probeError(d))
		}
		if d.epoch.Load() == epoch {
			t.Fatal("the decode came back from down with its pairs warm")
		}
		waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
	})
}

// A decode that answers its probe after a sign of a restart while a
// warm-up of its pair runs has the pair warmed again once that warm-up
// ends: the running one read the decode's epoch before the sign, so the
// warmth it records is stale (issue 20: the probe's rewarm was lost, and
// the pair stayed cold until keepWarm's next round, an hour here).
func TestRewarmWhileAWarmupRuns(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		srv, pr := h.warmPair(t, restartConfig())
		d := srv.decodes.backends()[0]
		if err := h.decode.SetFault(fake.Fault{Kind: fake.FaultHang}); err != nil {
			t.Fatal(err)
		}
		// A warm-up that the start's probe round set going may still run:
		// start would hand it back, and it would end warm without asking the
		// decode again.
		waitFor(t, "the pair's warm-ups to end", func() bool {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return pr.running == nil
		})
		pr.markCold()
		srv.warm.start(pr)
		waitFor(t, "the warm-up to be held", func() bool { return h.decode.Stats().FaultsInjected > 0 })
		suspectRestart(d)              // as a dropped connection does
		srv.checkOnce(5 * time.Second) // which the decode answers
		if d.restarted.Load() {
			t.Fatal("the decode answered its probe, and is still marked restarted")
		}
		if err := h.decode.SetFault(fake.Fault{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the pair to be warm again", func() bool { return srv.warm.isWarm(pr) })
	})
}

// A request that tells the decode a prefill DP rank, and finds its pooled
// connection to the decode closed, is not sent again at once, as other
// requests are: the decode may have restarted without the prefill's info,
// and the request waits for the pair's warm-up, its first prefill call
// aborted and no worker blamed (issue 20: it was resent at once, hint and
// all, to the restarted decode, which failed it with the first-request
// bug after the prefill had done the work).
func TestStaleConnToARestartedDecodeWaitsForTheWarmup(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream %t", stream), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				p, _ := h.dpPair()
				srv, pr := h.startWarm(t, restartConfig())
				body := seedRequest
				if stream {
					body = strings.Replace(body, `"stream": false`, `"stream": true`, 1)
				}
				// Requests leave pooled connections to the decode, which die
				// with it.
				for range 4 {
					if r := h.post("/generate", body); r.status != fasthttp.StatusOK {
						t.Fatalf("before the restart: got %d %s", r.status, r.body)
					}
				}
				if err := h.decode.Close(); err != nil {
					t.Fatal(err)
				}
				h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true, KVTimeout: 5 * time.Second})
				prefill := srv.prefills.backends()[0]
				for i := range 2 {
					r := h.post("/generate", body)
					if r.status != fasthttp.StatusOK || strings.Contains(string(r.body), `"error"`) {
						t.Fatalf("request %d after the restart: got %d %s", i, r.status, r.body)
					}
				}
				if n := h.decode.Stats().FirstRequestFailures; n != 0 {
					t.Errorf("%d requests reached the restarted decode with a DP-rank hint before it was warm", n)
				}
				if !srv.warm.isWarm(pr) {
					t.Error("the pair is cold after the requests")
				}
				// The first attempt's prefill call was cancelled, if it was
				// sent at all: the prefill holds nothing for it.
				waitIdle(t, srv)
				waitFor(t, "the prefill to hold no request", func() bool { return p.Stats().InFlight == 0 })
				if n := p.Stats().KVTransfersFailed; n != 0 {
					t.Errorf("the prefill failed %d KV transfers; want none (an abort is none)", n)
				}
				for name, want := range map[string]string{
					"pdlb_cold_pair_retries_total": "1", // the first request's, which waited for the warm-up
					"pdlb_retries_total":           "0",
					`pdlb_backend_errors_total{role="decode",backend="decode-0:30010"}`:   "0",
					`pdlb_backend_errors_total{role="prefill",backend="prefill-0:30000"}`: "0",
				} {
					if got := h.metric(name); got != want {
						t.Errorf("%s is %s; want %s", name, got, want)
					}
				}
				if !prefill.available() || !srv.decodes.backends()[0].available() {
					t.Error("a worker is out of selection")
				}
			})
		})
	}
}

// A decode whose pooled connection was closed and that refuses a new one
// is gone, not restarted: a request that tells it a prefill DP rank goes
// to another decode at once, as any request does, rather than wait for a
// warm-up of the pair that cannot be (redial).
func TestStaleConnToAGoneDecodeTriesAnother(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.dpPair()
		other := h.fake("decode-1:30011", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 4, FirstRequestBug: true, KVTimeout: 5 * time.Second})
		cfg := restartConfig()
		cfg.Decode = append(cfg.Decode, "http://decode-1:30011")
		cfg.DecodePolicy = PolicyRoundRobin
		srv, _ := h.startWarm(t, cfg)
		otherPair := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[1])
		waitFor(t, "the other pair to be warm", func() bool { return srv.warm.isWarm(otherPair) })
		for range 4 { // pooled connections to both decodes
			if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if err := h.decode.SetFault(fake.Fault{Kind: fake.FaultRefuse}); err != nil {
			t.Fatal(err)
		}
		srv.decodes.next.Store(0) // the next request goes to decode-0 first
		if r := h.post("/generate", seedRequest); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s; want the other decode's answer", r.status, r.body)
		}
		if n := other.Stats().FirstRequestFailures; n != 0 {
			t.Errorf("%d requests reached the other decode cold", n)
		}
		for name, want := range map[string]string{"pdlb_cold_pair_retries_total": "0", "pdlb_retries_total": "1"} {
			if got := h.metric(name); got != want {
				t.Errorf("%s is %s; want %s", name, got, want)
			}
		}
	})
}
