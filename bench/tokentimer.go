package bench

import "time"

// tokenTimer counts a stream's tokens and turns the arrivals of its token
// events into inter-token samples (readEvents says how). It is readEvents'
// state across events, kept apart so that the reading of events and the
// counting of tokens each read on their own. Its zero value is not ready:
// usage starts at -1.
type tokenTimer struct {
	first  time.Time // arrival of the first token event; zero if none
	prev   time.Time // arrival of the last token event counted
	events int       // token events counted
	seen   int       // tokens so far, as the events said or one per event
	usage  int       // the last count an event said; -1 while none has
}

// add counts an event that arrived at at, hasText and n being what
// workload.chunk read from it, and returns gaps with one sample appended
// per new token.
func (tt *tokenTimer) add(gaps []time.Duration, at time.Time, hasText bool, n int) []time.Duration {
	if n >= 0 {
		tt.usage = n
	}
	if !hasText {
		return gaps
	}
	count := tt.seen + 1
	if n >= 0 {
		// A server's count, however wrong, must not make millions
		// of samples: no request asks for more than maxDraw.
		count = min(n, maxDraw)
	}
	switch {
	case tt.events == 0:
		tt.first = at
	case count <= tt.seen:
		return gaps
	default:
		k := count - tt.seen
		gap := at.Sub(tt.prev) / time.Duration(k)
		for range k {
			gaps = append(gaps, gap)
		}
	}
	tt.prev, tt.seen = at, count
	tt.events++
	return gaps
}

// tokens returns the stream's output length: the last count an event
// said, which is the server's own (usage, completion_tokens), else one per
// token event.
func (tt *tokenTimer) tokens() int {
	if tt.usage >= 0 {
		return tt.usage
	}
	return tt.events
}
