package lb

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// hasSeries reports whether pdlb's /metrics shows a series starting with
// name.
func (h *harness) hasSeries(name string) bool {
	h.t.Helper()
	return strings.Contains(string(h.do(fasthttp.MethodGet, "/metrics", "").body), name)
}

// TestDecodesComeAndGo adds a decode at run time and sees it take requests;
// removes it while a request and a stream are in flight on it and sees
// both finish, no new request reach it, and its series go after the
// drain; sees an emptied pool answer 503 naming it, and /readiness say
// what is missing; then adds a decode back (issue 23 §1).
func TestDecodesComeAndGo(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d0 := h.pair(fake.Config{}, fake.Config{})
		gate := make(chan struct{})
		d1 := h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode, TokenGate: gate, Tokens: 2})
		srv := h.start(defaultConfig())

		b1, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010/"})
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010"}); again != b1 {
			t.Fatal("adding a member again made a second backend")
		}
		if err := srv.removeWorker(roleDecode, "http://decode-0:30010"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h.hasSeries(`backend="decode-0:30010"`) {
			t.Error("decode-0's series outlived its drain")
		}

		// A request and a stream held on decode-1 by its gate.
		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		opened := make(chan *stream, 1)
		go func() { opened <- h.openStream("/generate", `{"text": "a", "stream": true}`) }()
		synctest.Wait()
		if got := b1.inflight.Load(); got != 2 {
			t.Fatalf("decode-1 in flight: got %d; want 2", got)
		}
		served0 := d0.Stats().GenerateRequests

		if err := srv.removeWorker(roleDecode, "http://decode-1:30010"); err != nil {
			t.Fatal(err)
		}
		r := h.post("/generate", `{"text": "b"}`)
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "the decode pool has no workers") {
			t.Errorf("emptied pool: got %d %s; want 503 naming the decode pool", r.status, r.body)
		}
		ready := h.do(fasthttp.MethodGet, "/readiness", "")
		if ready.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(ready.body), `"a ready decode"`) {
			t.Errorf("/readiness: got %d %s; want 503 saying a decode is missing", ready.status, ready.body)
		}
		if !h.hasSeries(`pdlb_backend_inflight{role="decode",backend="decode-1:30010"} 2`) {
			t.Error("decode-1's series went before its drain")
		}

		close(gate) // the requests in flight finish
		st := <-opened
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Errorf("request in flight on the removed decode: got %d %s; want 200", r.status, r.body)
		}
		if evs := st.rest(); len(evs) != 3 || !strings.Contains(evs[2], "[DONE]") {
			t.Errorf("stream in flight on the removed decode: got %q; want it whole, up to [DONE]", evs)
		}
		time.Sleep(drainPoll) // the bubble's clock: the drain looks again
		synctest.Wait()
		if h.hasSeries(`backend="decode-1:30010"`) {
			t.Error("decode-1's series outlived its drain")
		}
		if got := d1.Stats().GenerateRequests; got != 2 {
			t.Errorf("decode-1 got %d generations; want 2 (none after its removal)", got)
		}

		if _, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-0:30010"}); err != nil {
			t.Fatal(err)
		}
		if r := h.post("/generate", `{"text": "c"}`); r.status != fasthttp.StatusOK {
			t.Errorf("decode-0 added back: got %d %s; want 200", r.status, r.body)
		}
		if got := d0.Stats().GenerateRequests; got != served0+1 {
			t.Errorf("decode-0 added back got %d generations; want %d", got, served0+1)
		}
	})
}

// TestRemoveThenAddIsANoOp takes a decode back while it drains: it is the
// same backend, its request in flight finishes, it takes new ones, and its
// series stay (issue 23 §1).
func TestRemoveThenAddIsANoOp(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		h.pair(fake.Config{}, fake.Config{TokenGate: gate, Tokens: 1})
		srv := h.start(defaultConfig())
		b := srv.decodes.backends()[0]

		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if err := srv.removeWorker(roleDecode, b.url); err != nil {
			t.Fatal(err)
		}
		again, err := srv.addWorker(roleDecode, PrefillSpec{URL: b.url})
		if err != nil {
			t.Fatal(err)
		}
		if again != b {
			t.Fatal("a decode taken back while it drained is a new backend")
		}
		close(gate)
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Errorf("request in flight: got %d %s; want 200", r.status, r.body)
		}
		if r := h.post("/generate", `{"text": "b"}`); r.status != fasthttp.StatusOK {
			t.Errorf("after re-adding: got %d %s; want 200", r.status, r.body)
		}
		synctest.Wait()
		if !h.hasSeries(`pdlb_backend_requests_total{role="decode",backend="decode-0:30010"} 2`) {
			t.Error("the series of a decode taken back were lost")
		}
	})
}

// TestRemovedDecodeDrainTimeout tears down a removed decode whose request
// outlives Config.DrainTimeout.
func TestRemovedDecodeDrainTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		h.pair(fake.Config{}, fake.Config{TokenGate: gate, Tokens: 1})
		cfg := defaultConfig()
		cfg.DrainTimeout = 10 * time.Second
		srv := h.start(cfg)
		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if err := srv.removeWorker(roleDecode, "http://decode-0:30010"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the drain waits on the clock
		if !h.hasSeries(`backend="decode-0:30010"`) {
			t.Fatal("torn down before the drain timeout")
		}
		time.Sleep(cfg.DrainTimeout) // the bubble's clock
		synctest.Wait()
		if h.hasSeries(`backend="decode-0:30010"`) {
			t.Error("still there after the drain timeout")
		}
		close(gate)
		<-done
	})
}
