package discovery

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// A worker appears at the first refresh that resolves it; one missing
// from the answers stays until RemoveAfter has passed since it was last
// seen, and one that comes back sooner stays unchanged.
func TestAddedAtOnceRemovedAfter(t *testing.T) {
	z := newZone(t)
	z.set(t, "d.pdlb.test", "A 10.0.0.1", "A 10.0.0.2")
	bubble(t, func(t *testing.T) {
		s, rec := newSource(t, z, Config{Decode: []string{"d.pdlb.test:30000"}, Interval: time.Second, RemoveAfter: 10 * time.Second})
		refresh(t, s, rec, Change{Added: workers(Decode, "http://10.0.0.1:30000", "http://10.0.0.2:30000")})

		z.set(t, "d.pdlb.test", "A 10.0.0.2", "A 10.0.0.3")
		refresh(t, s, rec, Change{Added: workers(Decode, "http://10.0.0.3:30000")})
		time.Sleep(9 * time.Second)
		refresh(t, s, rec, Change{})
		time.Sleep(time.Second)
		refresh(t, s, rec, Change{Removed: workers(Decode, "http://10.0.0.1:30000")})
		checkWorkers(t, s, workers(Decode, "http://10.0.0.2:30000", "http://10.0.0.3:30000"))

		// Back before RemoveAfter: no change, and the clock starts again.
		z.set(t, "d.pdlb.test", "A 10.0.0.3")
		refresh(t, s, rec, Change{})
		time.Sleep(5 * time.Second)
		z.set(t, "d.pdlb.test", "A 10.0.0.2", "A 10.0.0.3")
		refresh(t, s, rec, Change{})
		z.set(t, "d.pdlb.test", "A 10.0.0.3")
		time.Sleep(9 * time.Second)
		refresh(t, s, rec, Change{})
		time.Sleep(time.Second)
		refresh(t, s, rec, Change{Removed: workers(Decode, "http://10.0.0.2:30000")})
	})
}

// A name that fails (SERVFAIL) or answers empty (NXDOMAIN, no record)
// after a non-empty answer keeps its last good workers, however long that
// lasts, and each such answer is counted; the next good answer is taken.
func TestFailureAndEmptyKeepLastSet(t *testing.T) {
	z := newZone(t)
	z.set(t, "d.pdlb.test", "A 10.0.0.1")
	z.set(t, "e.pdlb.test", "A 10.0.1.1")
	bubble(t, func(t *testing.T) {
		ms := metrics.NewSet()
		kept := ms.NewCounter(`pdlb_dns_kept_total`)
		s, rec := newSource(t, z, Config{
			Decode:      []string{"d.pdlb.test:30000", "e.pdlb.test:30000"},
			RemoveAfter: 10 * time.Second,
			Kept:        kept,
		})
		want := workers(Decode, "http://10.0.0.1:30000", "http://10.0.1.1:30000")
		refresh(t, s, rec, Change{Added: want})

		z.fail(true)
		for range 3 {
			time.Sleep(10 * time.Second)
			refresh(t, s, rec, Change{})
		}
		checkWorkers(t, s, want)
		if got := kept.Get(); got != 6 {
			t.Fatalf("got %d answers kept; want 6 (two names, three refreshes)", got)
		}
		z.fail(false)

		// One name gone (NXDOMAIN), one with records of another type only.
		z.set(t, "d.pdlb.test")
		z.set(t, "e.pdlb.test", `TXT "no address"`)
		time.Sleep(10 * time.Second)
		refresh(t, s, rec, Change{})
		checkWorkers(t, s, want)
		if got := kept.Get(); got != 8 {
			t.Fatalf("got %d answers kept; want 8", got)
		}

		// A good answer again: taken, the missing worker removed after
		// RemoveAfter as usual.
		z.set(t, "d.pdlb.test", "A 10.0.0.2")
		z.set(t, "e.pdlb.test", "A 10.0.1.1")
		refresh(t, s, rec, Change{Added: workers(Decode, "http://10.0.0.2:30000")})
		time.Sleep(10 * time.Second)
		refresh(t, s, rec, Change{Removed: workers(Decode, "http://10.0.0.1:30000")})
		if got := kept.Get(); got != 8 {
			t.Fatalf("got %d answers kept; want still 8", got)
		}
	})
}

// A name that has never answered gives nothing, and is not counted as
// keeping anything; the log says so once, not at every refresh.
func TestEmptyFromTheStart(t *testing.T) {
	z := newZone(t)
	bubble(t, func(t *testing.T) {
		kept := metrics.NewSet().NewCounter(`pdlb_dns_kept_total`)
		s, rec := newSource(t, z, Config{Prefill: []string{"p.pdlb.test"}, Kept: kept})
		var log bytes.Buffer
		s.cfg.Log = zerolog.New(&log)
		refresh(t, s, rec, Change{})
		refresh(t, s, rec, Change{})
		checkWorkers(t, s, []Worker{})
		if got := kept.Get(); got != 0 {
			t.Fatalf("got %d answers kept; want 0", got)
		}
		if n := strings.Count(log.String(), "dns name answers no address"); n != 1 {
			t.Errorf("log %s; want one warning of the name answering no address", log.String())
		}
	})
}

// Run refreshes at once and then every Interval, on the bubble's clock,
// and stops when its context is done.
func TestRunEveryInterval(t *testing.T) {
	z := newZone(t)
	z.set(t, "d.pdlb.test", "A 10.0.0.1")
	bubble(t, func(t *testing.T) {
		changes := make(chan Change, 10)
		s, _ := newSource(t, z, Config{Decode: []string{"d.pdlb.test"}, Interval: 5 * time.Second})
		s.cfg.OnChange = func(c Change) { changes <- c }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			s.Run(ctx)
		}()
		c := <-changes
		if got := time.Since(start); got != 0 || !slices.Equal(c.Added, workers(Decode, "http://10.0.0.1:80")) {
			t.Fatalf("got %+v after %s; want 10.0.0.1 added at once", c, got)
		}
		z.set(t, "d.pdlb.test", "A 10.0.0.1", "A 10.0.0.2")
		c = <-changes
		if got := time.Since(start); got != 5*time.Second || !slices.Equal(c.Added, workers(Decode, "http://10.0.0.2:80")) {
			t.Fatalf("got %+v after %s; want 10.0.0.2 added after 5s", c, got)
		}
		cancel()
		<-done
	})
}

// A refresh cut short by its caller's context (shutdown) changes, counts
// and logs nothing.
func TestRefreshCancelled(t *testing.T) {
	z := newZone(t)
	z.set(t, "d.pdlb.test", "A 10.0.0.1")
	bubble(t, func(t *testing.T) {
		kept := metrics.NewSet().NewCounter(`pdlb_dns_kept_total`)
		s, rec := newSource(t, z, Config{Decode: []string{"d.pdlb.test"}, Kept: kept})
		refresh(t, s, rec, Change{Added: workers(Decode, "http://10.0.0.1:80")})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		z.set(t, "d.pdlb.test", "A 10.0.0.2")
		s.Refresh(ctx)
		if got := rec.take(); len(got) != 0 || kept.Get() != 0 {
			t.Fatalf("got changes %+v and %d kept; want none", got, kept.Get())
		}
	})
}
