package bench

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestAppendProgress renders the display of runs at chosen moments: it had
// no total, no share done and no time left (issue 20).
func TestAppendProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	f := func(tn turn, done, failed, warm int64, now time.Duration, bar bool, want string) {
		t.Helper()
		s := progressSnapshot{turn: &tn, done: done, failed: failed, warm: warm}
		if got := string(appendProgress([]byte("x|"), s, at(now), bar)); got != "x|"+want {
			t.Fatalf("at %v: got\n%q; want\n%q", now, got, "x|"+want)
		}
	}
	// -d 30s: the share and the time left are the time's.
	window := turn{start: t0, measureStart: t0, measureEnd: at(30 * time.Second), total: 30 * time.Second}
	f(window, 1234, 5, 0, 12600*time.Millisecond, true,
		"[=====>      ]  42%  12.6s/30s  1234 req  5 err  97.5 req/s  ETA 17s")
	f(window, 1234, 5, 0, 12600*time.Millisecond, false,
		" 42%  12.6s/30s  1234 req  5 err  97.5 req/s  ETA 17s")
	// After the window, while the last requests end: all of it, over the
	// window's time.
	f(window, 3000, 0, 0, 31*time.Second, true,
		"[============] 100%  30.0s/30s  3000 req  0 err  100.0 req/s  ETA 0s")

	// -n 5000: the share is the count's, the time left the rate's.
	count := turn{start: t0, measureStart: t0, requests: 5000}
	f(count, 2000, 0, 0, 10*time.Second, true,
		"[====>       ]  40%  10.0s  2000/5000 req  0 err  200.0 req/s  ETA 15s")
	f(count, 0, 0, 0, 2*time.Second, true,
		"[>           ]   0%  2.0s  0/5000 req  0 err  0.0 req/s  ETA -")

	// -n 1000 -d 60s: whichever ends first.
	both := turn{start: t0, measureStart: t0, measureEnd: at(time.Minute), total: time.Minute, requests: 1000}
	f(both, 500, 100, 0, 10*time.Second, true,
		"[======>     ]  50%  10.0s/1m00s  500/1000 req  100 err  40.0 req/s  ETA 10s")
	f(both, 100, 0, 0, 50*time.Second, true,
		"[==========> ]  83%  50.0s/1m00s  100/1000 req  0 err  2.0 req/s  ETA 10s")

	// --warmup 5s -d 30s: the warm-up is part of the schedule.
	warm := turn{start: t0, measureStart: at(5 * time.Second), measureEnd: at(35 * time.Second), total: 35 * time.Second}
	f(warm, 0, 0, 42, 2*time.Second, true,
		"[>           ]   6%  2.0s/35s  warm-up: 42 req  ETA 33s")
	f(warm, 100, 0, 42, 15*time.Second, true,
		"[=====>      ]  43%  15.0s/35s  100 req  0 err  10.0 req/s  ETA 20s")

	// Compare: the third turn of rounds of 2 s, of 12 s in all, 1 s in;
	// the rate over this target's rounds.
	cmp := turn{label: "pdlb 2/3  ", start: t0, measureStart: t0, measureEnd: at(2 * time.Second),
		before: 4 * time.Second, total: 12 * time.Second, measuredBefore: 2 * time.Second}
	f(cmp, 300, 0, 0, time.Second, true,
		"pdlb 2/3  [=====>      ]  42%  5.0s/12s  300 req  0 err  100.0 req/s  ETA 7s")

	// Long runs.
	long := turn{start: t0, measureStart: t0, measureEnd: at(2 * time.Hour), total: 2 * time.Hour}
	f(long, 10, 0, 0, 65*time.Second, false,
		"  1%  1m05s/2h00m  10 req  0 err  0.2 req/s  ETA 1h58m")
}

// recordingWriter keeps what is written, and signals each write.
type recordingWriter struct {
	mu     sync.Mutex
	b      strings.Builder
	writes chan struct{}
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	select {
	case w.writes <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *recordingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestProgressTicks drives the display with ticks the test sends: on a
// terminal, a line redrawn in place and blanked at the end; otherwise a
// plain line each tick (nothing was shown at all when standard error was
// not a terminal, issue 20). Nothing is written before a turn is set.
func TestProgressTicks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &runner{}
	tn := &turn{r: r, start: t0, measureStart: t0, measureEnd: t0.Add(10 * time.Second), total: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		lines bool
		want  string
	}{
		{"terminal", false,
			"\r[=>          ]  10%  1.0s/10s  2 req  0 err  2.0 req/s  ETA 9s" +
				"\r[==>         ]  20%  2.0s/10s  10 req  1 err  4.5 req/s  ETA 8s" +
				"\r" + strings.Repeat(" ", len("[==>         ]  20%  2.0s/10s  10 req  1 err  4.5 req/s  ETA 8s")) + "\r"},
		{"log", true,
			" 10%  1.0s/10s  2 req  0 err  2.0 req/s  ETA 9s\n" +
				" 20%  2.0s/10s  10 req  1 err  4.5 req/s  ETA 8s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.done.Store(2)
			r.failed.Store(0)
			w := &recordingWriter{writes: make(chan struct{}, 1)}
			p := newProgress(&Config{Progress: w, ProgressLines: tc.lines})
			ticks := make(chan time.Time)
			p.done.Go(func() { p.run(ticks) })
			tick := func(now time.Time) {
				t.Helper()
				ticks <- now
				select {
				case <-w.writes:
				case <-time.After(5 * time.Second):
					t.Fatal("the tick wrote nothing")
				}
			}
			ticks <- t0.Add(time.Second) // no turn yet: nothing
			p.set(tn)
			tick(t0.Add(time.Second))
			r.done.Store(10)
			r.failed.Store(1)
			tick(t0.Add(2 * time.Second))
			p.end()
			got := w.String()
			if got != tc.want {
				t.Fatalf("got\n%q; want\n%q", got, tc.want)
			}
		})
	}
}

// TestRunProgress checks that a run shows its display on Config.Progress
// while it goes, and clears it before Run returns: the target holds the
// first answer until the display has been drawn.
func TestRunProgress(t *testing.T) {
	t.Parallel()
	w := &recordingWriter{writes: make(chan struct{}, 1)}
	rc := &recorder{}
	h := jsonHandler(rc, fasthttp.StatusOK, `{"text":"","meta_info":{"completion_tokens":1}}`)
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		if rc.count() == 0 {
			select {
			case <-w.writes:
			case <-time.After(5 * time.Second):
				t.Error("no progress was shown")
			}
		}
		h(ctx)
	})
	cfg.Requests = 3
	cfg.Progress = w
	run(t, cfg)

	s := w.String()
	if !strings.HasPrefix(s, "\r[") || !strings.Contains(s, "  0/3 req  0 err") {
		t.Fatalf("got progress %q; want a bar with 0 of 3 requests done", s)
	}
	draws := strings.Split(strings.TrimSuffix(s, "\r"), "\r")
	if last := draws[len(draws)-1]; strings.TrimSpace(last) != "" || len(last) < len(draws[1]) {
		t.Fatalf("got last progress write %q; want blanks over %q", last, draws[1])
	}
}
