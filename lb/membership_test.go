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

		b1, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010/"}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-1:30010"}, sourceAPI); again != b1 {
			t.Fatal("adding a member again made a second backend")
		}
		if _, err := srv.removeWorker(roleDecode, "http://decode-0:30010", sourceAll); err != nil {
			t.Fatal(err)
		}
		time.Sleep(drainPoll) // the bubble's clock: the drain looks, and finds nothing in flight
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

		if _, err := srv.removeWorker(roleDecode, "http://decode-1:30010", sourceAll); err != nil {
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
		if !h.hasSeries(`pdlb_backend_inflight{role="decode",backend="decode-1:30010"} 2`) ||
			!h.hasSeries(`pdlb_backend_draining{role="decode",backend="decode-1:30010"} 1`) {
			t.Error("decode-1's series went before its drain, or do not say it drains")
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

		if _, err := srv.addWorker(roleDecode, PrefillSpec{URL: "http://decode-0:30010"}, sourceAPI); err != nil {
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
		if _, err := srv.removeWorker(roleDecode, b.url, sourceAll); err != nil {
			t.Fatal(err)
		}
		again, err := srv.addWorker(roleDecode, PrefillSpec{URL: b.url}, sourceAPI)
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
// and stream outlive Config.DrainTimeout: both are cut then, the request
// answered with a 503 and the stream with an error event, each naming the
// removal; its connections close, and its series go (issue 23 §1).
func TestRemovedDecodeDrainTimeout(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		t.Cleanup(func() { close(gate) })
		h.pair(fake.Config{}, fake.Config{TokenGate: gate, Tokens: 2})
		cfg := defaultConfig()
		cfg.DrainTimeout = 10 * time.Second
		srv := h.start(cfg)
		b := srv.decodes.backends()[0]
		// A stream under way (its first token let through), and a request.
		opened := make(chan *stream, 1)
		go func() { opened <- h.openStream("/generate", `{"text": "a", "stream": true}`) }()
		synctest.Wait()
		gate <- struct{}{}
		st := <-opened
		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if _, err := srv.removeWorker(roleDecode, "http://decode-0:30010", sourceAll); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the drain waits on the clock
		if !h.hasSeries(`backend="decode-0:30010"`) {
			t.Fatal("torn down before the drain timeout")
		}
		time.Sleep(cfg.DrainTimeout) // the bubble's clock
		synctest.Wait()
		const removal = "was removed, and its drain timeout (10s) passed with this request still running"
		if r := <-done; r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), removal) {
			t.Errorf("request cut at the drain timeout: got %d %s; want 503 naming the removal", r.status, r.body)
		}
		if evs := st.rest(); len(evs) < 2 || !strings.Contains(evs[len(evs)-2], removal) ||
			!strings.Contains(evs[len(evs)-1], "[DONE]") {
			t.Errorf("stream cut at the drain timeout: got %q; want an error event naming the removal, then [DONE]", evs)
		}
		if got := b.hc.ConnsCount(); got != 0 {
			t.Errorf("pdlb still holds %d connections to the removed decode; want 0", got)
		}
		if h.hasSeries(`backend="decode-0:30010"`) {
			t.Error("still there after the drain timeout")
		}
		if !h.hasSeries(`pdlb_request_errors_total{reason="worker_removed"} 2`) {
			t.Error("the cuts are not counted as worker_removed errors")
		}
	})
}

// A stream whose prefill has done its part goes on on its decode when that
// prefill is removed and its drain timeout passes for another request still
// on it: the cut takes only calls not over on the removed worker.
func TestDrainTimeoutSparesStreamsWhosePrefillIsDone(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		t.Cleanup(func() { close(gate) })
		h.pair(fake.Config{PrefillDelay: time.Second}, fake.Config{TokenGate: gate, Tokens: 3})
		cfg := defaultConfig()
		cfg.DrainTimeout = 500 * time.Millisecond
		srv := h.start(cfg)
		p := srv.prefills.backends()[0]
		opened := make(chan *stream, 1)
		go func() { opened <- h.openStream("/generate", `{"text": "a", "stream": true}`) }()
		time.Sleep(time.Second) // the bubble's clock: stream A's prefill
		synctest.Wait()
		letToken(t, gate, "first")
		st := <-opened
		if got := p.inflight.Load(); got != 0 {
			t.Fatalf("prefill in flight once A's prefill is done: %d; want 0", got)
		}
		b := make(chan reply, 1) // request B, whose prefill runs on p
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "b"}`); b <- r }()
		synctest.Wait()
		if _, err := srv.removeWorker(rolePrefill, p.url, sourceAll); err != nil {
			t.Fatal(err)
		}
		time.Sleep(cfg.DrainTimeout) // the bubble's clock
		synctest.Wait()
		if r := <-b; r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "was removed") {
			t.Errorf("request B, its prefill still on the removed prefill: got %d %s; want a 503 naming the removal", r.status, r.body)
		}
		letToken(t, gate, "second")
		letToken(t, gate, "third")
		if evs := st.rest(); len(evs) != 4 || !strings.Contains(evs[2], "tok2") || !strings.Contains(evs[3], "[DONE]") {
			t.Errorf("stream A, its prefill done and its decode a member: got %q; want its tokens whole, up to [DONE]", evs)
		}
	})
}

// letToken lets one token step through gate, failing if no stream takes it.
func letToken(t *testing.T, gate chan struct{}, which string) {
	t.Helper()
	select {
	case gate <- struct{}{}:
	case <-time.After(time.Minute): // the bubble's clock: nothing else will take it
		t.Errorf("the decode does not take its %s token: its stream was cut", which)
	}
}

// TestPrefillsComeAndGo replaces the prefill at run time by one whose
// bootstrap port pdlb learns from its /server_info: plain requests go
// there, and one naming disagg_prefill_dp_rank, sent before the registry
// has read it, waits for its pair's warm-up (the decode has the
// first-request bug) and succeeds; a prefill added with no request has
// its pairs warmed once ready (issue 23 §1).
func TestPrefillsComeAndGo(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p0, _ := h.dpPair()
		p1 := h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, DPSize: 4, BootstrapPort: 9001, KVTimeout: 5 * time.Second})
		srv := h.start(warmConfig())
		h.waitBootstrap()
		synctest.Wait() // prefill-0's pair is warm
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		b1, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-1:30000"}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 1}`); r.status != fasthttp.StatusOK {
			t.Fatalf("a DP request through the added prefill: got %d %s; want 200 once its pair is warm", r.status, r.body)
		}
		if pr := srv.warm.pair(b1, srv.decodes.backends()[0]); !srv.warm.isWarm(pr) {
			t.Error("the added prefill's pair is not warm")
		}
		if st := srv.registry.State(b1.index); !st.Ready || st.Port != 9001 || st.PortSource != "server_info" {
			t.Errorf("the added prefill's registry state: got %+v; want ready on port 9001, from /server_info", st)
		}
		if r := h.post("/generate", `{"text": "b"}`); r.status != fasthttp.StatusOK {
			t.Errorf("a plain request through the added prefill: got %d %s; want 200", r.status, r.body)
		}
		// The warm-up's one request per decode DP rank, and the two above.
		if got := p1.Stats().GenerateRequests; got != 4+2 {
			t.Errorf("the added prefill got %d generations; want 6", got)
		}
		if got := p0.Stats().GenerateRequests; got != 4 {
			t.Errorf("the removed prefill got %d generations; want its 4 warm-ups only", got)
		}

		// Unasked, a prefill's pairs are warmed once the registry has read it.
		h.fake("prefill-2:30000", fake.Config{Role: fake.RolePrefill, DPSize: 4, KVTimeout: 5 * time.Second})
		b2, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-2:30000", BootstrapPort: 8998}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if pr := srv.warm.pair(b2, srv.decodes.backends()[0]); !srv.warm.isWarm(pr) {
			t.Error("the pair of a prefill added at run time was not warmed once it was ready")
		}
	})
}

// TestRemovedPrefillDrains removes a prefill while a request is in flight
// on it: the request finishes, no new one reaches it, its series (its
// registry's included) go after the drain; added back, it is a new
// backend with a new registry target (issue 23 §1).
func TestRemovedPrefillDrains(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		const delay = 10 * time.Second
		p0, _ := h.pair(fake.Config{PrefillDelay: delay}, fake.Config{})
		h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, KVTimeout: 5 * time.Second})
		srv := h.start(defaultConfig())
		b0 := srv.prefills.backends()[0]

		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if got := b0.inflight.Load(); got != 1 {
			t.Fatalf("prefill-0 in flight: got %d; want 1", got)
		}
		if _, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-1:30000", BootstrapPort: 8998}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		if r := h.post("/generate", `{"text": "b"}`); r.status != fasthttp.StatusOK {
			t.Errorf("after the removal: got %d %s; want 200 from prefill-1", r.status, r.body)
		}
		for _, name := range []string{`backend="prefill-0:30000"`, `pdlb_bootstrap_ready{prefill="prefill-0:30000"}`} {
			if !h.hasSeries(name) {
				t.Errorf("the series %s went before the drain", name)
			}
		}

		time.Sleep(delay) // the bubble's clock: the request in flight ends
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Errorf("request in flight on the removed prefill: got %d %s; want 200", r.status, r.body)
		}
		time.Sleep(drainPoll)
		synctest.Wait()
		for _, name := range []string{`backend="prefill-0:30000"`, `prefill="prefill-0:30000"`} {
			if h.hasSeries(name) {
				t.Errorf("the series %s outlived the drain", name)
			}
		}
		if got := p0.Stats().GenerateRequests; got != 1 {
			t.Errorf("prefill-0 got %d generations; want 1 (none after its removal)", got)
		}
		if st := srv.registry.State(b0.index); st.Ready {
			t.Errorf("the drained prefill's registry state: got %+v; want it gone", st)
		}

		again, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-0:30000", BootstrapPort: 8998}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		if again == b0 || again.index == b0.index {
			t.Fatalf("prefill-0 added back after its drain: got backend %p index %d; want a new backend and index", again, again.index)
		}
		synctest.Wait()
		if !srv.registry.State(again.index).Ready || !h.hasSeries(`pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`) {
			t.Error("prefill-0 added back is not followed by the registry")
		}
	})
}

// TestPrefillTakenBack takes a prefill back while it drains: the same
// backend and registry target, still ready.
func TestPrefillTakenBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{PrefillDelay: time.Second}, fake.Config{})
		srv := h.start(defaultConfig())
		h.waitBootstrap()
		b := srv.prefills.backends()[0]
		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if _, err := srv.removeWorker(rolePrefill, b.url, sourceAll); err != nil {
			t.Fatal(err)
		}
		again, err := srv.addWorker(rolePrefill, PrefillSpec{URL: b.url, BootstrapPort: 8998}, sourceAPI)
		if err != nil || again != b {
			t.Fatalf("got %p, %v; want the draining backend %p back", again, err, b)
		}
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Errorf("request in flight: got %d %s; want 200", r.status, r.body)
		}
		time.Sleep(drainPoll)
		synctest.Wait()
		if !srv.registry.State(b.index).Ready || !h.hasSeries(`pdlb_bootstrap_ready{prefill="prefill-0:30000"} 1`) {
			t.Error("the prefill taken back lost its registry target")
		}
		if r := h.post("/generate", `{"text": "b"}`); r.status != fasthttp.StatusOK {
			t.Errorf("after taking it back: got %d %s; want 200", r.status, r.body)
		}
	})
}

// TestLastPrefillRemoved empties the prefill pool: without a fallback
// pool, a request gets a 503 naming the empty prefill pool; with one
// (added at run time), it goes there.
func TestLastPrefillRemoved(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		fb := h.fake("fallback-0:30020", fake.Config{})
		srv := h.start(defaultConfig())
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		r := h.post("/generate", `{"text": "a"}`)
		if r.status != fasthttp.StatusServiceUnavailable || !strings.Contains(string(r.body), "the prefill pool has no workers") {
			t.Errorf("no prefill, no fallback: got %d %s; want 503 naming the empty prefill pool", r.status, r.body)
		}
		if _, err := srv.addWorker(roleFallback, PrefillSpec{URL: "http://fallback-0:30020"}, sourceAPI); err != nil {
			t.Fatal(err)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Errorf("no prefill, a fallback: got %d %s; want 200 from the fallback", r.status, r.body)
		}
		if got := fb.Stats().GenerateRequests; got != 1 {
			t.Errorf("the fallback got %d generations; want 1", got)
		}
	})
}

// TestPrefillBackOnAnotherPort has a prefill come back on another
// bootstrap port, removed and added again as DNS discovery does: taken
// back, it is read on its new port, and serves (issue 23 §1).
func TestPrefillBackOnAnotherPort(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p0, _ := h.pair(fake.Config{}, fake.Config{})
		srv := h.start(defaultConfig())
		h.waitBootstrap()
		if err := p0.Close(); err != nil {
			t.Fatal(err)
		}
		h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 9001, KVTimeout: 5 * time.Second})
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		b, err := srv.addWorker(rolePrefill, PrefillSpec{URL: "http://prefill-0:30000", BootstrapPort: 9001}, sourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := srv.registry.State(b.index); !st.Ready || st.Port != 9001 {
			t.Fatalf("got registry state %+v; want ready on port 9001", st)
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
			t.Errorf("through the prefill on its new port: got %d %s; want 200", r.status, r.body)
		}
	})
}
