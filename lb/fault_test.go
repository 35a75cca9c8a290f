package lb

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// TestFaultMatrix sends a request through pdlb while one leg's worker fails
// in each way a worker fails, streamed and not, and checks the client's
// answer: complete, or a clear error, in bounded time; and that pdlb has
// nothing left in flight afterwards (goroutines are checked by TestMain).
func TestFaultMatrix(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	faults := []fake.Fault{
		{Kind: fake.FaultRefuse},
		{Kind: fake.FaultError, Status: fasthttp.StatusInternalServerError},
		{Kind: fake.FaultError, Status: fasthttp.StatusServiceUnavailable},
		{Kind: fake.FaultHang},
		{Kind: fake.FaultCut, Events: 1},
		{Kind: fake.FaultStall, Events: 1},
	}
	type faultCase struct {
		name   string
		f      fake.Fault
		leg    string
		stream bool
	}
	var overTCP []faultCase
	for _, f := range faults {
		for _, leg := range []string{rolePrefill, roleDecode} {
			for _, stream := range []bool{false, true} {
				name := f.Kind.String() + "/" + leg + map[bool]string{false: "/buffered", true: "/stream"}[stream]
				if f.Kind == fake.FaultError {
					name += "/" + statusWord(f.Status)
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					inBubble(t, func(t *testing.T) { runFault(t, f, leg, stream, false) })
				})
				if faultOnSocket(f.Kind) {
					overTCP = append(overTCP, faultCase{name, f, leg, stream})
				}
			}
		}
	}
	// The cases over TCP wait out their timeouts in real time, idle: they
	// run side by side, started from goroutines of their own, rather than
	// each holding one of the few slots of -parallel.
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		var wg sync.WaitGroup
		for _, c := range overTCP {
			wg.Go(func() {
				t.Run(c.name, func(t *testing.T) { runFault(t, c.f, c.leg, c.stream, true) })
			})
		}
		wg.Wait()
	})
}

// faultOnSocket reports whether a fault of kind k surfaces in pdlb's socket
// layer, which in-memory connections skip (workerConn reads an answer's
// first bytes through the poller, under the deadline, only on a socket):
// those cases run over TCP as well. A worker that hangs or stalls fails a
// socket's deadline, one that cuts its answer closes the socket under a
// read. A refused dial never makes a socket, and an error is a whole
// answer, read as every answer of the TCP tests is.
func faultOnSocket(k fake.FaultKind) bool {
	return k == fake.FaultHang || k == fake.FaultCut || k == fake.FaultStall
}

func statusWord(status int) string { return strings.Fields(fasthttp.StatusMessage(status))[0] }

// faultBound is the longest a client may wait for its answer in the matrix:
// the retries of a request each wait for a KV timeout at most.
const faultBound = 6 * time.Second

func runFault(t *testing.T, f fake.Fault, leg string, stream, tcp bool) {
	h := newHarness(t)
	h.tcpWorkers = tcp
	kv := fake.Config{KVTimeout: 500 * time.Millisecond, Tokens: 4, TokenDelay: time.Millisecond}
	p, d := h.pair(kv, kv)
	victim := map[string]*fake.Server{rolePrefill: p, roleDecode: d}[leg]
	cfg := defaultConfig()
	cfg.RequestTimeout = 5 * time.Second
	cfg.FirstByteTimeout = time.Second
	cfg.StreamIdleTimeout = 300 * time.Millisecond
	srv := h.start(cfg)
	if err := victim.SetFault(f); err != nil {
		t.Fatal(err)
	}
	// Let the held requests go when the test ends, whatever happened.
	t.Cleanup(func() { _ = victim.SetFault(fake.Fault{}) })

	body := `{"text": "a", "stream": ` + map[bool]string{false: "false", true: "true"}[stream] + `}`
	start := time.Now()
	r := h.do(fasthttp.MethodPost, "/generate", body)
	took := time.Since(start)
	result := classifyAnswer(r.status, r.body, stream)
	t.Logf("%s on the %s: %d in %s: %.200s", f.Kind, leg, r.status, took.Round(time.Millisecond), r.body)
	if result != soakComplete && result != soakClearError {
		t.Fatalf("the client got neither a complete answer nor a clear error: %d %s", r.status, r.body)
	}
	if took > faultBound {
		t.Fatalf("the client waited %s", took)
	}
	if f.Kind == fake.FaultRefuse {
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "no "+leg+" backend is available") {
			t.Fatalf("got %d %s; want a 503 naming the empty %s pool", r.status, r.body, leg)
		}
	}
	_ = victim.SetFault(fake.Fault{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.waitExchanges(ctx); err != nil {
		t.Fatalf("exchanges still live: %s", err)
	}
	for _, b := range srv.allBackends() {
		if n := b.inflight.Load(); n != 0 {
			t.Fatalf("%s %s still has %d requests in flight", b.role, b.addr, n)
		}
		// Every connection left must be idle in the pool: a busy one
		// would be leaked.
		if busy := b.hc.ConnsCount() - b.hc.IdleConnsCount(); busy != 0 {
			t.Fatalf("%s %s still has %d connections in use", b.role, b.addr, busy)
		}
	}
	// Once healthy again, the pair serves.
	if r := h.post("/generate", `{"text": "b"}`); f.Kind != fake.FaultRefuse && r.status != fasthttp.StatusOK {
		t.Fatalf("after the fault: got %d %s", r.status, r.body)
	}
}
