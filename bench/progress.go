package bench

import (
	"bytes"
	"fmt"
	"io"
	"time"
)

// progressInterval is how often the progress line is rewritten.
const progressInterval = 250 * time.Millisecond

// showProgress rewrites the progress line until stop is closed, then
// clears it. Write errors are ignored: the display is a courtesy, and the
// run must not fail because a terminal went away.
func (r *runner) showProgress(stop <-chan struct{}) {
	p := progress{w: r.cfg.Progress}
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	p.show(r.appendProgress(p.line[:0], time.Now()))
	for {
		select {
		case <-stop:
			p.clear()
			return
		case now := <-tick.C:
			p.show(r.appendProgress(p.line[:0], now))
		}
	}
}

// appendProgress appends the state of the run at now to dst: in Compare,
// of the current target, prefixed with its name and round.
func (r *runner) appendProgress(dst []byte, now time.Time) []byte {
	dst = append(dst, r.label...)
	if now.Before(r.measureStart) {
		return fmt.Appendf(dst, "warm-up %.1fs  %d requests",
			now.Sub(r.start).Seconds(), r.warm.Load())
	}
	elapsed := (r.elapsed + now.Sub(r.measureStart)).Seconds()
	done, failed := r.done.Load(), r.failed.Load()
	var rate float64
	if elapsed > 0 {
		rate = float64(done-failed) / elapsed
	}
	return fmt.Appendf(dst, "%.1fs  %d requests  %d errors  %.1f req/s",
		elapsed, done, failed, rate)
}

// progress is a line rewritten in place with '\r'.
type progress struct {
	w     io.Writer
	line  []byte
	width int // of the longest line shown, to blank what a shorter one leaves
	out   []byte
}

// show replaces the displayed line with line.
func (p *progress) show(line []byte) {
	p.line = line
	p.out = append(append(p.out[:0], '\r'), line...)
	if pad := p.width - len(line); pad > 0 {
		p.out = append(p.out, bytes.Repeat([]byte{' '}, pad)...)
	}
	p.width = max(p.width, len(line))
	_, _ = p.w.Write(p.out)
}

// clear blanks the line and leaves the cursor at its start.
func (p *progress) clear() {
	p.out = append(p.out[:0], '\r')
	p.out = append(p.out, bytes.Repeat([]byte{' '}, p.width)...)
	p.out = append(p.out, '\r')
	_, _ = p.w.Write(p.out)
}
