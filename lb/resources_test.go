package lb

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/health"
)

// A worker call pdlb cannot make for want of descriptors is pdlb's
// failure, not the worker's: the client gets a 503 that says so, not a 502
// blaming the worker, and neither the worker's breaker, its health state
// nor its epoch (its pairs' warmth) is touched. Under the flood of issue
// 19, such failures took both workers out, and clients got 503s for
// seconds after the flood ended. So is a call pdlb has no local port left
// for (EADDRNOTAVAIL), which the restart signs of issue 20 took for the
// worker's.
func TestOutOfDescriptorsIsNotTheWorkersFault(t *testing.T) {
	for _, tt := range []struct {
		name    string
		starved string // the worker pdlb cannot dial
		body    string
		errno   syscall.Errno
	}{
		{"prefill", "prefill-0:30000", `{"text": "a"}`, syscall.EMFILE},
		{"decode", "decode-0:30010", `{"text": "a"}`, syscall.EMFILE},
		{"decode, stream", "decode-0:30010", `{"text": "a", "stream": true}`, syscall.EMFILE},
		{"decode, no local port", "decode-0:30010", `{"text": "a"}`, syscall.EADDRNOTAVAIL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.pair(fake.Config{}, fake.Config{})
				var starved atomic.Bool
				h.dialFault = func(addr string) error {
					if starved.Load() && addr == tt.starved {
						return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", tt.errno)}
					}
					return nil
				}
				cfg := checkedConfig()
				cfg.HealthCheck.Fall = 1 // one counted probe failure would take a worker down
				cfg.Breaker = BreakerConfig{Threshold: 1, MinBackoff: time.Hour}
				srv := h.start(cfg)
				waitFirstRound(t, srv)
				workers := append(srv.prefills.backends()[:1:1], srv.decodes.backends()[0])
				var epochs []uint64
				for _, b := range workers {
					epochs = append(epochs, b.epoch.Load())
				}

				starved.Store(true)
				r := h.post("/generate", tt.body)
				msg := gjson.GetBytes(r.body, "error.message").String()
				if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(msg, tt.errno.Error()) ||
					!strings.Contains(msg, tt.starved+", which is not at fault") {
					t.Fatalf("got %d %s; want a 503 saying pdlb is out of resources (%s), not %s", r.status, r.body, tt.errno, tt.starved)
				}
				if got := h.metric(`pdlb_request_errors_total{reason="out_of_resources"}`); got != "1" {
					t.Errorf("got %q out_of_resources errors; want 1", got)
				}
				srv.checkOnce(5 * time.Second) // the probes of the starved worker fail too
				for i, b := range workers {
					if !b.available() || health.State(b.health.Load()) != health.Up || b.breaker.State() != health.Closed {
						t.Errorf("%s is %v, breaker %v; want up, closed, in selection", b.addr,
							health.State(b.health.Load()), b.breaker.State())
					}
					if got := b.epoch.Load(); got != epochs[i] {
						t.Errorf("%s's epoch went from %d to %d; want it unchanged", b.addr, epochs[i], got)
					}
				}

				starved.Store(false)
				if r := h.post("/generate", tt.body); r.status != fasthttp.StatusOK {
					t.Fatalf("got %d %s once descriptors are back; want 200", r.status, r.body)
				}
			})
		})
	}
}

// A read of a prefill's bootstrap server pdlb lacked the descriptors to
// make keeps the prefill in selection, as the registry knew it.
func TestBootstrapReadOutOfDescriptorsKeepsThePrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		var starved atomic.Bool
		h.dialFault = func(addr string) error {
			if starved.Load() && addr == "prefill-0:8998" {
				return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
			}
			return nil
		}
		srv := h.start(checkedConfig())
		h.waitBootstrap()
		starved.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.registry.Refresh(ctx, 0); !health.OutOfResources(err) {
			t.Fatalf("got %v; want the registry's read to fail for want of descriptors", err)
		}
		if p := srv.prefills.backends()[0]; !srv.registry.State(0).Ready || !p.available() {
			t.Fatalf("the prefill is out of selection (%s); want it kept", srv.whyOut(p))
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s; want 200", r.status, r.body)
		}
	})
}
