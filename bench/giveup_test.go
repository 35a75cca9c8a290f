package bench

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestStreak(t *testing.T) {
	var s streak
	t0 := time.Unix(1000, 0)
	check := func(now time.Duration, wantD time.Duration, wantFails int, wantGiveUp bool) {
		t.Helper()
		d, fails, messages := s.failed(t0.Add(now), "status_404", []byte("Not Found"), 3*time.Second)
		if d != wantD || fails != wantFails || (messages != nil) != wantGiveUp {
			t.Fatalf("failure at %v: got a streak of %v, %d failures, messages %v; want %v, %d, given up %v",
				now, d, fails, messages, wantD, wantFails, wantGiveUp)
		}
	}
	check(time.Second, 0, 1, false)
	check(2*time.Second, time.Second, 2, false)
	check(4*time.Second, 3*time.Second, 3, false) // too few
	check(4*time.Second, 3*time.Second, 4, false)
	check(4*time.Second, 3*time.Second, 5, true)
	s.succeeded()
	check(5*time.Second, 0, 1, false) // a new streak
	s.succeeded()
	s.succeeded()
	check(9*time.Second, 0, 1, false)

	// A pause between turns does not count.
	s.pause(t0.Add(10 * time.Second))
	s.resume(t0.Add(20 * time.Second))
	check(21*time.Second, 2*time.Second, 2, false)
	s.pause(t0.Add(21 * time.Second))
	s.resume(t0.Add(30 * time.Second))
	for i := range 3 {
		check(31*time.Second, 3*time.Second, 3+i, i == 2)
	}
}

// TestStreakOlderInFlight checks the count of requests in flight since
// before a streak: the streak gives up only once they have ended, however
// they interleave with its start.
func TestStreakOlderInFlight(t *testing.T) {
	var s streak
	t0 := time.Unix(1000, 0)
	fail := func(n int) (gaveUp bool) {
		t.Helper()
		var messages []ErrorMessage
		for range n {
			_, _, messages = s.failed(t0.Add(10*time.Second), "status_429", nil, time.Second)
		}
		return messages != nil
	}
	slow1, slow2 := s.begin(), s.begin()
	first := s.begin()
	s.end(first)
	s.failed(t0, "status_429", nil, time.Second) // the streak starts: slow1 and slow2 are older
	late := s.begin()
	if fail(5) {
		t.Fatal("gave up with two older requests in flight")
	}
	s.end(late) // started after the streak's start: not older
	s.end(slow1)
	if fail(1) {
		t.Fatal("gave up with an older request in flight")
	}
	s.end(slow2)
	if !fail(1) {
		t.Fatal("did not give up once the older requests ended")
	}

	// An older request that ended after a later streak's start counts in
	// that streak, once.
	s.succeeded()
	old := s.begin()
	s.failed(t0, "status_429", nil, time.Second)
	s.succeeded()
	s.failed(t0, "status_429", nil, time.Second) // a second streak: old is older to it too
	s.end(old)
	if !fail(5) {
		t.Fatal("did not give up once the older request ended")
	}
	if got := s.flight.Load() & (1<<32 - 1); got != 0 {
		t.Fatalf("got %d requests in flight; want none", got)
	}
}

// fakeClock is a clock that moves step forward each time it is read.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// TestRunGivesUp loads a target whose every request fails, on a clock
// that moves a fixed step per failure: the run must stop at the failure
// that makes GiveUpAfter (3 s) without a success and at least 5 failures,
// and say what they failed with. It once sent tens of thousands of failing
// requests a second to the end of the run (issue 20).
func TestRunGivesUp(t *testing.T) {
	notFound := jsonHandler(&recorder{}, fasthttp.StatusNotFound, `{"detail":"Not Found"}`)
	for _, tc := range []struct {
		name string
		h    fasthttp.RequestHandler // nil: connections are refused
		step time.Duration
		sent int    // requests before giving up
		last string // the last failure's kind and message
	}{
		{"404, the count binds", notFound, time.Second, 5, "status_404: Not Found"},
		{"404, the time binds", notFound, 100 * time.Millisecond, 31, "status_404: Not Found"},
		{"500", jsonHandler(&recorder{}, fasthttp.StatusInternalServerError, `{"error":{"message":"KV transfer failed"}}`),
			time.Second, 5, "status_500: KV transfer failed"},
		{"refused connections", nil, time.Second, 5, "connect: cannot connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{URL: "http://fake.test", Dial: refused, Timeout: 5 * time.Second}
			if tc.h != nil {
				cfg = serve(t, tc.h)
			}
			clock := &fakeClock{t: time.Unix(1000, 0), step: tc.step}
			cfg.now, cfg.connectPause = clock.now, time.Nanosecond
			cfg.Duration = 5 * time.Second // a failure deadline: the give-up ends it at once
			rep := run(t, cfg)

			if rep.Requests != tc.sent || rep.OK != 0 {
				t.Fatalf("got %d requests, %d ok (errors %v); want %d, none ok", rep.Requests, rep.OK, rep.Errors, tc.sent)
			}
			d := time.Duration(tc.sent-1) * tc.step
			want := "no request succeeded in " + d.String() + " and " + strconv.Itoa(tc.sent) + " failed; the last: " + tc.last
			if rep.GaveUp != want || rep.Interrupted {
				t.Fatalf("got gave up %q, interrupted %v; want %q, not interrupted", rep.GaveUp, rep.Interrupted, want)
			}
			kind, msg, _ := strings.Cut(tc.last, ": ")
			if m := rep.GaveUpMessages; len(m) != 1 || m[0] != (ErrorMessage{Kind: kind, Message: msg, Count: tc.sent}) {
				t.Fatalf("got gave-up messages %+v; want %s %q %d times", m, kind, msg, tc.sent)
			}
			var text, js strings.Builder
			lines := "gave up      " + want + "\n" + fmt.Sprintf("%-12s %s %d times: %s\n", "", kind, tc.sent, msg)
			if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), lines) {
				t.Fatalf("got\n%s\n(%v); want lines saying why it gave up:\n%s", text.String(), err, lines)
			}
			if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"gave_up": "`+want+`"`) ||
				!strings.Contains(js.String(), `"gave_up_messages": [`) {
				t.Fatalf("got JSON\n%s\n(%v); want gave_up saying why, and gave_up_messages", js.String(), err)
			}
		})
	}
}

// A success ends a streak, and NoGiveUp never gives up: both runs go to
// their end.
func TestRunDoesNotGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		okEvery int // the requests that succeed; 0: none
		giveUp  time.Duration
	}{
		{"a success every fifth request", 5, 0},
		{"never", 0, NoGiveUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{}
			cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
				n := rc.add(ctx)
				ctx.SetContentType("application/json")
				if tc.okEvery > 0 && n%tc.okEvery == 0 {
					ctx.SetBodyString(`{"text":" a","meta_info":{"completion_tokens":1}}`)
					return
				}
				ctx.SetStatusCode(fasthttp.StatusNotFound)
				ctx.SetBodyString(`{"detail":"Not Found"}`)
			})
			clock := &fakeClock{t: time.Unix(1000, 0), step: time.Second}
			cfg.now, cfg.GiveUpAfter, cfg.Requests = clock.now, tc.giveUp, 40
			rep := run(t, cfg)
			if rep.Requests != 40 || rep.GaveUp != "" {
				t.Fatalf("got %d requests, gave up %q; want 40, not given up", rep.Requests, rep.GaveUp)
			}
		})
	}
}

// TestOpenLoopGivesUp gives up on a target of the open loop too, whose
// arrivals keep coming whatever the answers.
func TestOpenLoopGivesUp(t *testing.T) {
	cfg := serve(t, jsonHandler(&recorder{}, fasthttp.StatusNotFound, `{"detail":"Not Found"}`))
	clock := &fakeClock{t: time.Unix(1000, 0), step: time.Second}
	cfg.now, cfg.Rate, cfg.Duration = clock.now, 1000, 5*time.Second
	rep := run(t, cfg)
	if rep.Requests < giveUpMinFailures || rep.OK != 0 || !strings.HasSuffix(rep.GaveUp, "status_404: Not Found") || rep.Interrupted {
		t.Fatalf("got %d requests, %d ok, gave up %q, interrupted %v; want at least %d, none ok, given up, not interrupted",
			rep.Requests, rep.OK, rep.GaveUp, rep.Interrupted, giveUpMinFailures)
	}
}

// TestCompareGivesUp ends a comparison when one target fails every
// request: its report says why, the other's does not, and neither was
// interrupted.
func TestCompareGivesUp(t *testing.T) {
	t.Parallel()
	targets, cfg := serveTargets(t, []string{"good", "bad"},
		jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`),
		jsonHandler(&recorder{}, fasthttp.StatusNotFound, `{"detail":"Not Found"}`))
	clock := &fakeClock{t: time.Unix(1000, 0), step: time.Second}
	cfg.now, cfg.Duration, cfg.Round = clock.now, 5*time.Second, minRound
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds >= c.Planned {
		t.Fatalf("got %d of %d rounds; want the comparison ended early", c.Rounds, c.Planned)
	}
	g, b := c.Reports[0], c.Reports[1]
	if g.GaveUp != "" || !strings.HasSuffix(b.GaveUp, "status_404: Not Found") || g.Interrupted || b.Interrupted {
		t.Fatalf("got gave up %q and %q, interrupted %v and %v; want the second alone given up, neither interrupted",
			g.GaveUp, b.GaveUp, g.Interrupted, b.Interrupted)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil || !strings.Contains(text.String(), "gave up      bad: no request succeeded") {
		t.Fatalf("got\n%s\n(%v); want a line saying why it gave up on bad", text.String(), err)
	}
}

// manualClock is a clock that moves only when told to.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestCompareGiveUpCountsOwnTurns compares a target whose every request
// fails, taking no time on the give-up clock, with one whose every request
// takes it a second forward: the first must not be given up, as it was for
// the time of the other's turn between two of its own (issue 20: a target
// failing at the end of one turn and the start of the next was given up
// after 0.6 s of its own time).
func TestCompareGiveUpCountsOwnTurns(t *testing.T) {
	t.Parallel()
	clock := &manualClock{t: time.Unix(1000, 0)}
	good := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`)
	targets, cfg := serveTargets(t, []string{"failing", "slow"},
		jsonHandler(&recorder{}, fasthttp.StatusNotFound, `{"detail":"Not Found"}`),
		func(ctx *fasthttp.RequestCtx) {
			clock.advance(time.Second)
			good(ctx)
		})
	cfg.now, cfg.GiveUpAfter = clock.now, time.Second
	cfg.Concurrency, cfg.Duration, cfg.Round = 5, 2*minRound, minRound
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Reports[0]
	if c.Rounds != c.Planned || f.GaveUp != "" || f.OK != 0 || f.Requests < giveUpMinFailures {
		t.Fatalf("got %d of %d rounds, %d requests, %d ok, gave up %q; want every round, at least %d requests, none ok, not given up",
			c.Rounds, c.Planned, f.Requests, f.OK, f.GaveUp, giveUpMinFailures)
	}
}

// TestRunGiveUpWaitsForOlderRequests loads a target at its admission
// limit: two requests hold its two slots, and the others are refused at
// once with 429, until 20 have been. The run must wait for the two rather
// than give up: it gave up before the first success (issue 20, pdlb's
// --max-concurrent-requests in front of long generations).
func TestRunGiveUpWaitsForOlderRequests(t *testing.T) {
	const limit = 20
	slots, release := make(chan struct{}, 2), make(chan struct{})
	var refused atomic.Int32
	ok := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`)
	busy := jsonHandler(&recorder{}, fasthttp.StatusTooManyRequests, `{"error":{"message":"too many requests"}}`)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		select {
		case <-release:
			ok(ctx)
			return
		default:
		}
		select {
		case slots <- struct{}{}:
			<-release
			<-slots
			ok(ctx)
		default:
			if refused.Add(1) == limit {
				close(release)
			}
			busy(ctx)
		}
	})
	clock := &fakeClock{t: time.Unix(1000, 0), step: time.Second}
	cfg.now, cfg.Concurrency, cfg.Requests = clock.now, 4, 2*limit
	rep := run(t, cfg)
	if rep.GaveUp != "" || rep.Requests != 2*limit || rep.Errors["status_429"] < limit || rep.OK == 0 {
		t.Fatalf("got %d requests, %d ok, errors %v, gave up %q; want %d, some ok, at least %d status_429, not given up",
			rep.Requests, rep.OK, rep.Errors, rep.GaveUp, 2*limit, limit)
	}
}

// TestCompareGiveUpKeepsMessages gives up a target in a later round of a
// comparison: its report, taken back to the rounds before, must still say
// what every distinct failure that gave it up said. Only the last was
// left, in the gave-up line (issue 20).
func TestCompareGiveUpKeepsMessages(t *testing.T) {
	t.Parallel()
	var served atomic.Bool
	var n atomic.Int32
	good := jsonHandler(&recorder{}, fasthttp.StatusOK, `{"text":" a","meta_info":{"completion_tokens":1}}`)
	notFound := jsonHandler(&recorder{}, fasthttp.StatusNotFound, `{"detail":"Not Found"}`)
	broken := jsonHandler(&recorder{}, fasthttp.StatusInternalServerError, `{"error":{"message":"KV transfer failed"}}`)
	targets, cfg := serveTargets(t, []string{"bad", "good"},
		func(ctx *fasthttp.RequestCtx) {
			switch {
			case !served.Load():
				good(ctx) // its first round
			case n.Add(1)%2 == 0:
				notFound(ctx)
			default:
				broken(ctx)
			}
		},
		func(ctx *fasthttp.RequestCtx) {
			served.Store(true)
			good(ctx)
		})
	clock := &fakeClock{t: time.Unix(1000, 0), step: time.Second}
	cfg.now, cfg.Duration, cfg.Round = clock.now, 3*minRound, minRound
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Reports[0]
	if c.Rounds == 0 || c.Rounds >= c.Planned || b.GaveUp == "" {
		t.Fatalf("got %d of %d rounds, gave up %q; want bad given up after the first", c.Rounds, c.Planned, b.GaveUp)
	}
	var fails int
	if _, err := fmt.Sscanf(b.GaveUp[strings.Index(b.GaveUp, " and ")+len(" and "):], "%d failed", &fails); err != nil {
		t.Fatalf("cannot read the failures in %q: %v", b.GaveUp, err)
	}
	want := map[string]string{"status_404": "Not Found", "status_500": "KV transfer failed"}
	sum := 0
	for _, m := range b.GaveUpMessages {
		if want[m.Kind] != m.Message {
			t.Errorf("got message %+v; want one of %v", m, want)
		}
		sum += m.Count
	}
	if len(b.GaveUpMessages) != 2 || sum != fails {
		t.Fatalf("got gave-up messages %+v; want both kinds, counting the %d failures", b.GaveUpMessages, fails)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`gave up      bad: no request succeeded [^\n]*\n {13}status_(404|500) \d+ times?: (Not Found|KV transfer failed)\n {13}status_(404|500) \d+ times?: (Not Found|KV transfer failed)\n`)
	if !block.MatchString(text.String()) {
		t.Fatalf("got\n%s\nwant both messages under the gave-up line", text.String())
	}
}
