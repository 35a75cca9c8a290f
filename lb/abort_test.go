package lb

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// abortRID names one rid a call, whatever the batch, and never an empty
// one, which SGLang's scheduler would match, as a prefix, with every
// request it holds.
func TestAbortRID(t *testing.T) {
	f := func(raw, want string) {
		t.Helper()
		got, ok := abortRID(raw)
		if got != want || ok != (want != "") {
			t.Fatalf("abortRID(%s) = %q, %v; want %q", raw, got, ok, want)
		}
	}
	f(`"request-1"`, "request-1")
	f(`"batch"`, "batch") // a batch's one rid: SGLang's items are batch_0, batch_1
	f(`["request-1", "request-2"]`, "request-1")
	f(``, "") // no rid
	f(`""`, "")
	f(`[""]`, "")
	f(`[]`, "")
	f(`7`, "")
	f(`[7]`, "")
	f(`null`, "")
}

// An abort names a rid only when SGLang's prefix match would abort no
// other request with it: a rid long enough, and none pdlb serves starting
// with it.
func TestAbortsOne(t *testing.T) {
	srv, err := New(defaultConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv.flight = []*exchange{{rid: `"request-1"`}, {rid: `["batch-one-0", "batch-one-1"]`}, {rid: `"request-10"`}}
	f := func(rid string, want bool) {
		t.Helper()
		if got := srv.abortsOne(rid); got != want {
			t.Fatalf("abortsOne(%q) = %v; want %v", rid, got, want)
		}
	}
	f("request-10", true)
	f("request-1", false) // request-10 starts with it
	f("request-", false)
	f("batch-one-0", true)
	f("batch-one-", false)
	f("request-2", true) // served elsewhere, or gone: nothing here starts with it
	f("r", false)        // too short: a sixteenth of uuid4 rids start with a hex digit
	f("1234567", false)
	f("12345678", true)
}

// A worker gets perSecond aborts at once after a quiet second, then one
// each 1/perSecond, on Config.Now's clock; and no more than
// maxAbortsInFlight at a time, whatever the rate.
func TestAbortGate(t *testing.T) {
	var g abortGate
	taken := func(at time.Duration, tries int) int {
		t.Helper()
		n := 0
		for range tries {
			if g.take(at, 4) {
				g.done()
				n++
			}
		}
		return n
	}
	for _, step := range []struct {
		at   time.Duration
		want int
	}{
		{0, 4},                       // a burst of a second's worth
		{100 * time.Millisecond, 0},  // not a quarter second on
		{250 * time.Millisecond, 1},  // a quarter second: one more
		{260 * time.Millisecond, 0},  // and no more
		{time.Hour, 4},               // a long quiet: a second's worth, not an hour's
		{time.Hour + time.Second, 4}, // a second later, a second's worth again
	} {
		if got := taken(step.at, 10); got != step.want {
			t.Fatalf("at %s: %d of 10 aborts let go; want %d", step.at, got, step.want)
		}
	}
	var open abortGate
	n := 0
	for range 10 {
		if open.take(0, 100) {
			n++
		}
	}
	if n != maxAbortsInFlight {
		t.Fatalf("%d aborts under way at once; want %d", n, maxAbortsInFlight)
	}
	open.done()
	if !open.take(0, 100) {
		t.Fatal("an abort that ended did not make room for another")
	}
}

// batchBody is a /generate batch of n prompts, rid being its "rid" value.
func batchBody(n int, rid string) string {
	texts := make([]string, n)
	for i := range texts {
		texts[i] = strconv.Quote("p" + strconv.Itoa(i))
	}
	return `{"text": [` + strings.Join(texts, ", ") + `], "rid": ` + rid + `}`
}

// ridList is a JSON list of n rids, prefix-0 on.
func ridList(prefix string, n int) string {
	rids := make([]string, n)
	for i := range rids {
		rids[i] = strconv.Quote(prefix + strconv.Itoa(i))
	}
	return "[" + strings.Join(rids, ", ") + "]"
}

// abortRecorder records the rids of the /abort_request calls a worker got.
type abortRecorder struct {
	mu   sync.Mutex
	rids []string
}

func (a *abortRecorder) record(path string, body []byte) {
	if path != "/abort_request" {
		return
	}
	a.mu.Lock()
	a.rids = append(a.rids, gjson.GetBytes(body, "rid").String())
	a.mu.Unlock()
}

func (a *abortRecorder) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.rids...)
}

// failOnceHeld is a worker that fails /generate with a 503 once held is
// signalled (its peer has the request), and counts the /abort_request
// calls it gets in aborts.
func failOnceHeld(held <-chan struct{}, aborts *atomic.Int32) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/abort_request" {
			aborts.Add(1)
			return
		}
		select {
		case <-held:
		case <-time.After(5 * time.Second): // a failure deadline: the test fails on the counts
		}
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error": {"message": "unavailable"}}`)
	}
}

// A request pdlb gives up on sends each worker at most one /abort_request,
// a 64-item batch too, named by the rid SGLang names it by, or the first of
// its list; an empty rid is never sent (issue 19, item 8: a dropped batch
// sent up to 128, and a client dropping batches on purpose made pdlb send
// thousands a second). Either leg may be the one cancelled: the one whose
// peer failed.
func TestDroppedRequestAbortsOncePerWorker(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"one rid", `{"text": "a", "rid": "request-1"}`, "request-1"},
		{"a batch's list of rids", batchBody(64, ridList("batch-item-", 64)), "batch-item-0"},
		{"a batch's one rid", batchBody(64, `"batch-rid"`), "batch-rid"},
		{"an empty rid", `{"text": "a", "rid": ""}`, ""},
		{"no rid", `{"text": "a"}`, ""},
	} {
		for _, failing := range []string{rolePrefill, roleDecode} {
			t.Run(tc.name+", the "+failing+" failing", func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					h := newHarness(t)
					held := make(chan struct{}, 1)
					var rec abortRecorder
					fcfg := fake.Config{KVTimeout: 5 * time.Second, OnRequest: func(path string, body []byte) {
						rec.record(path, body)
						if path == "/generate" {
							held <- struct{}{}
						}
					}}
					var failedAborts atomic.Int32
					var cancelled *fake.Server
					if failing == rolePrefill {
						h.backend("prefill-0:30000", failOnceHeld(held, &failedAborts))
						fcfg.Role = fake.RoleDecode
						cancelled = h.fake("decode-0:30010", fcfg)
					} else {
						fcfg.Role = fake.RolePrefill
						cancelled = h.fake("prefill-0:30000", fcfg)
						h.backend("decode-0:30010", failOnceHeld(held, &failedAborts))
					}
					cfg := defaultConfig()
					cfg.DisableRetries = true
					srv := h.start(cfg)
					if r := h.post("/generate", tc.body); r.status < fasthttp.StatusInternalServerError {
						t.Fatalf("got %d %s; want the %s's failure", r.status, r.body, failing)
					}
					waitIdle(t, srv) // includes the aborts
					want := []string{}
					if tc.want != "" {
						want = []string{tc.want}
					}
					if got := rec.got(); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
						t.Fatalf("the cancelled leg's worker got /abort_request for %q; want %q", got, want)
					}
					if n := cancelled.Stats().AbortRequest; n != uint64(len(want)) {
						t.Fatalf("the cancelled leg's worker counted %d /abort_request; want %d", n, len(want))
					}
					if n := failedAborts.Load(); n != 0 {
						t.Fatalf("the failed leg's worker got %d /abort_request; want none", n)
					}
					if got := h.metric("pdlb_abort_requests_total"); got != strconv.Itoa(len(want)) {
						t.Fatalf("got pdlb_abort_requests_total %q; want %d", got, len(want))
					}
				})
			})
		}
	}
}

// Beyond MaxAbortsPerSecond a second, the aborts a worker would get are
// dropped and counted, on Config.Now's clock (issue 19, item 8).
func TestAbortsBeyondTheRateAreDropped(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		held := make(chan struct{}, 1)
		decode := h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second,
			OnRequest: func(path string, _ []byte) {
				if path == "/generate" {
					held <- struct{}{}
				}
			}})
		var prefillAborts atomic.Int32
		h.backend("prefill-0:30000", failOnceHeld(held, &prefillAborts))
		cfg := defaultConfig()
		cfg.DisableRetries = true
		cfg.Breaker.Disable = true // the prefill fails every request on purpose
		cfg.MaxAbortsPerSecond = 2
		base := time.Now()
		var ahead atomic.Int64
		cfg.Now = func() time.Time { return base.Add(time.Duration(ahead.Load())) }
		srv := h.start(cfg)
		drop := func(n int) {
			t.Helper()
			for i := range n {
				if r := h.post("/generate", `{"text": "a", "rid": "request-`+strconv.Itoa(i)+`"}`); r.status != fasthttp.StatusServiceUnavailable {
					t.Fatalf("got %d %s; want the prefill's 503", r.status, r.body)
				}
				// One at a time: the fake decode fails the requests waiting
				// on a prefill info fetch that an abort interrupted.
				waitFor(t, "the decode to end the request", func() bool { return decode.Stats().InFlight == 0 })
			}
			waitIdle(t, srv)
		}
		check := func(when string, sent uint64, dropped int) {
			t.Helper()
			if n := decode.Stats().AbortRequest; n != sent {
				t.Fatalf("%s: the decode got %d /abort_request; want %d", when, n, sent)
			}
			if got := h.metric("pdlb_abort_requests_dropped_total"); got != strconv.Itoa(dropped) {
				t.Fatalf("%s: got pdlb_abort_requests_dropped_total %q; want %d", when, got, dropped)
			}
		}
		drop(5)
		check("5 dropped requests in one instant", 2, 3)
		ahead.Store(int64(500 * time.Millisecond))
		drop(2)
		check("2 more half a second on", 3, 4)
	})
}

// The /abort_request calls under way to one worker are bounded, so that a
// worker slow to answer them does not make pdlb hold a connection for
// each (issue 19, item 8: 8,242 descriptors); those beyond are dropped
// and counted.
func TestAbortsInFlightAreBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		release := make(chan struct{})
		var arrived, under, most atomic.Int32
		h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
			n := under.Add(1)
			defer under.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			arrived.Add(1)
			select {
			case <-release:
			case <-time.After(5 * time.Second): // a failure deadline
			}
		})
		h.backend("prefill-0:30000", func(*fasthttp.RequestCtx) {})
		srv := h.start(defaultConfig())
		d := srv.decodes.backends()[0]
		for i := range 20 {
			srv.abortRequest(d, "r-"+strconv.Itoa(i))
		}
		if got := h.metric("pdlb_abort_requests_dropped_total"); got != strconv.Itoa(20-maxAbortsInFlight) {
			t.Fatalf("got pdlb_abort_requests_dropped_total %q; want %d", got, 20-maxAbortsInFlight)
		}
		waitFor(t, "the aborts to reach the worker", func() bool { return arrived.Load() == maxAbortsInFlight })
		close(release)
		waitIdle(t, srv)
		if n, m := arrived.Load(), most.Load(); n != maxAbortsInFlight || m > maxAbortsInFlight {
			t.Fatalf("the worker got %d aborts, %d at once; want %d, at most %d at once", n, m, maxAbortsInFlight, maxAbortsInFlight)
		}
	})
}

// SGLang aborts every request whose rid starts with the one an abort
// names: a client's abort by rid that would name another's request too,
// or any rid shorter than minAbortRID, gets a 400 and reaches no worker
// (issue 19: one client cancelling everyone's requests).
func TestAbortByPrefixIsRefused(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		gate := make(chan struct{})
		p, d := h.pair(fake.Config{}, fake.Config{TokenGate: gate})
		srv := h.start(defaultConfig())
		got := make(chan reply, 1)
		go func() {
			got <- h.post("/generate", `{"text": "a", "rid": "request-10", "sampling_params": {"max_new_tokens": 2}}`)
		}()
		waitFor(t, "the decode to hold the request", func() bool { return d.Stats().InFlight == 1 })
		for _, rid := range []string{"request-1", "request-", "r"} {
			r := h.post("/abort_request", `{"rid": "`+rid+`"}`)
			if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadRequest || !strings.Contains(msg, "starts with") {
				t.Errorf("an abort of %q: got %d %s; want a 400 saying why", rid, r.status, r.body)
			}
		}
		if n := p.Stats().AbortRequest + d.Stats().AbortRequest; n != 0 {
			t.Fatalf("the workers got %d aborts; want none", n)
		}
		close(gate)
		if r := <-got; r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "meta_info.finish_reason.type").String() == "abort" {
			t.Fatalf("the request the aborts would have named got %d %s", r.status, r.body)
		}
		waitIdle(t, srv)
	})
}
