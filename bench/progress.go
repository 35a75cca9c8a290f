package bench

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// How often the progress display is updated: a line redrawn in place is
// cheap and shows the run moving; a log gets a line now and then, as
// long-running tools write to logs (issue 20: a log got nothing).
const (
	progressInterval     = 250 * time.Millisecond
	progressLineInterval = 5 * time.Second
)

// progressBarWidth is the width of the bar between its brackets: with the
// figures beside it, a line stays within 80 columns.
const progressBarWidth = 12

// progress shows how a run goes on Config.Progress: a line redrawn in
// place, or with Config.ProgressLines one plain line every
// progressLineInterval. The goroutine driving the load sets each round's
// turn; a goroutine of its own reads it with the runner's counters on each
// tick and writes the display, so the load never waits for it.
type progress struct {
	w     io.Writer
	lines bool
	turn  atomic.Pointer[turn]

	stop chan struct{}
	done sync.WaitGroup
	line []byte
	out  []byte
	wide int // the longest line shown, to blank what a shorter one leaves
}

// turn is one round of one runner as the progress display sees it: what
// it does not read from the runner's counters. It is immutable.
type turn struct {
	r     *runner // its counters only
	label string  // the target and round in Compare; "" in Run
	// start, measureStart and measureEnd are the round's (measureEnd
	// zero when only a request count bounds it).
	start, measureStart, measureEnd time.Time
	// before is the scheduled time (warm-ups and windows) of the turns
	// before this one, and total that of the whole run: zero when only a
	// request count bounds it.
	before, total time.Duration
	// measuredBefore is the runner's measured time in earlier rounds.
	measuredBefore time.Duration
	// requests is Config.Requests: zero when only time bounds the run.
	requests int64
}

// progressSnapshot is a turn with the runner's counters at one moment.
type progressSnapshot struct {
	*turn
	done, failed, warm int64
}

// newProgress returns the display cfg asks for, or nil for none.
func newProgress(cfg *Config) *progress {
	if cfg.Progress == nil {
		return nil
	}
	return &progress{w: cfg.Progress, lines: cfg.ProgressLines, stop: make(chan struct{})}
}

// start shows the display, every interval, until end. Nil shows none.
func (p *progress) start() {
	if p == nil {
		return
	}
	every := progressInterval
	if p.lines {
		every = progressLineInterval
	}
	tick := time.NewTicker(every)
	p.done.Go(func() {
		defer tick.Stop()
		p.run(tick.C)
	})
}

// run writes the display at each tick's time until end.
func (p *progress) run(ticks <-chan time.Time) {
	for {
		select {
		case <-p.stop:
			if !p.lines && p.wide > 0 {
				p.clear()
			}
			return
		case now := <-ticks:
			p.show(now)
		}
	}
}

// end removes the display and waits until it is gone. Nil is fine.
func (p *progress) end() {
	if p == nil {
		return
	}
	close(p.stop)
	p.done.Wait()
}

// set makes t the turn shown. Nil is fine.
func (p *progress) set(t *turn) {
	if p != nil {
		p.turn.Store(t)
	}
}

// show writes the display at now, if a turn was set.
func (p *progress) show(now time.Time) {
	t := p.turn.Load()
	if t == nil {
		return
	}
	s := progressSnapshot{turn: t, done: t.r.done.Load(), failed: t.r.failed.Load(), warm: t.r.warm.Load()}
	p.line = appendProgress(p.line[:0], s, now, !p.lines)
	if p.lines {
		p.out = append(append(p.out[:0], p.line...), '\n')
	} else {
		p.out = append(append(p.out[:0], '\r'), p.line...)
		if pad := p.wide - len(p.line); pad > 0 {
			p.out = append(p.out, bytes.Repeat([]byte{' '}, pad)...)
		}
		p.wide = max(p.wide, len(p.line))
	}
	// Errors are ignored: the display is a courtesy, and the run must not
	// fail because a terminal went away.
	_, _ = p.w.Write(p.out)
}

// clear blanks the redrawn line and leaves the cursor at its start.
func (p *progress) clear() {
	p.out = append(p.out[:0], '\r')
	p.out = append(p.out, bytes.Repeat([]byte{' '}, p.wide)...)
	p.out = append(p.out, '\r')
	_, _ = p.w.Write(p.out)
}

// progressFigures are the figures of a snapshot at one moment.
type progressFigures struct {
	sched    time.Duration // scheduled time elapsed
	measured time.Duration // measured time elapsed, for the rate
	warming  bool
	share    float64       // done, from 0 to 1
	left     time.Duration // the time left, when known
	known    bool
}

// figuresAt computes the figures of s at now. A run bounded by time counts
// its scheduled time (warm-ups included); one bounded by a count estimates
// the time left from the time a request took so far; with both, whichever
// comes first.
func figuresAt(s progressSnapshot, now time.Time) progressFigures {
	t := s.turn
	var f progressFigures
	sched := now.Sub(t.start)
	if !t.measureEnd.IsZero() {
		sched = min(sched, t.measureEnd.Sub(t.start)) // the round drains
	}
	f.sched = t.before + max(sched, 0)
	f.warming = now.Before(t.measureStart)
	f.measured = t.measuredBefore
	if !f.warming {
		end := now
		if !t.measureEnd.IsZero() && end.After(t.measureEnd) {
			end = t.measureEnd
		}
		f.measured += end.Sub(t.measureStart)
	}
	if t.total > 0 {
		f.share = float64(f.sched) / float64(t.total)
		f.left, f.known = t.total-f.sched, true
	}
	if t.requests > 0 {
		f.share = max(f.share, float64(s.done)/float64(t.requests))
		if !f.warming && s.done > 0 && f.measured > 0 {
			byCount := time.Duration(t.requests-s.done) * (f.measured / time.Duration(s.done))
			if !f.known || byCount < f.left {
				f.left = byCount
			}
			f.known = true
		}
	}
	f.share = min(max(f.share, 0), 1)
	f.left = max(f.left, 0)
	return f
}

// appendProgress appends to dst the state of the run in s at now: a bar
// when bar is set, the share done, the time elapsed (of the total), the
// requests (of the total), errors, successful requests a second and the
// time left, as figuresAt computes them.
func appendProgress(dst []byte, s progressSnapshot, now time.Time, bar bool) []byte {
	f := figuresAt(s, now)
	dst = append(dst, s.label...)
	if bar {
		dst = appendBar(dst, f.share)
	}
	dst = fmt.Appendf(dst, "%3.0f%%  %s", f.share*100, formatClock(f.sched, true))
	if s.total > 0 {
		dst = append(dst, '/')
		dst = append(dst, formatClock(s.total, false)...)
	}
	if f.warming {
		dst = fmt.Appendf(dst, "  warm-up: %d req", s.warm)
	} else {
		dst = fmt.Appendf(dst, "  %d", s.done)
		if s.requests > 0 {
			dst = fmt.Appendf(dst, "/%d", s.requests)
		}
		var rate float64
		if f.measured > 0 {
			rate = float64(s.done-s.failed) / f.measured.Seconds()
		}
		dst = fmt.Appendf(dst, " req  %d err  %.1f req/s", s.failed, rate)
	}
	if !f.known {
		return append(dst, "  ETA -"...)
	}
	return append(append(dst, "  ETA "...), formatClock(f.left, false)...)
}

// appendBar appends a bar share full.
func appendBar(dst []byte, share float64) []byte {
	full := int(share * progressBarWidth)
	dst = append(dst, '[')
	dst = append(dst, strings.Repeat("=", full)...)
	if full < progressBarWidth {
		dst = append(dst, '>')
		dst = append(dst, strings.Repeat(" ", progressBarWidth-full-1)...)
	}
	return append(dst, "] "...)
}

// formatClock shows d briefly: 12.6s (tenths) or 13s under a minute,
// 2m05s under an hour, 1h02m beyond.
func formatClock(d time.Duration, tenths bool) string {
	if tenths && d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	s := int64((d + time.Second/2) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}
