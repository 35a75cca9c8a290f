package hostile

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Issue 19, items 6 and 8: clients that stop reading, and clients that
// drop what they asked for.

const (
	// stallPool is pdlb's --max-conns-per-backend in the stalled-streams
	// attack: small, so that a few stalled streams could take it all.
	stallPool = 16
	// stallRoundSlack is how long after --client-stall-timeout-secs a
	// round of stalled streams may take to be let go: filling the socket
	// buffers, noticing, aborting.
	stallRoundSlack = 3 * time.Second
	// batchItems is the size of each dropped batch.
	batchItems = 64
	// abortCallsPerDrop is the most abort calls a worker may get for one
	// dropped request: issue 19 asks for at most one per worker.
	abortCallsPerDrop = 1
	// dropDrainTimeout bounds the wait for the dropped batches to leave the
	// workers, far below the minute each would generate for.
	dropDrainTimeout = 15 * time.Second
)

// stalledStreamsEnv gives pdlb a small pool of connections to each worker,
// and the stall timeout after which it lets a client that reads nothing go.
func stalledStreamsEnv(form) envConfig {
	return envConfig{flags: []serveFlag{
		{"--max-conns-per-backend", strconv.Itoa(stallPool)},
		{"--client-stall-timeout-secs", strconv.Itoa(stallTimeoutSecs)},
	}}
}

// stallRounds is how many times the stalled streams can fill pdlb's pool
// of decode connections: while it is full, well-behaved requests wait for
// a stalled stream to be let go.
func stallRounds(f form) int { return (f.stalledStreams + stallPool - 1) / stallPool }

// stallLetGo is how long pdlb may take to let every stalled stream go.
func stallLetGo(f form) time.Duration {
	return time.Duration(stallRounds(f)) * (stallTimeoutSecs*time.Second + stallRoundSlack)
}

// stalledStreams (item 6) opens form.stalledStreams streams, more than
// pdlb's --max-conns-per-backend, each asking for a million tokens on a
// connection with the smallest receive window, and never reads them. The
// well-behaved clients must not be starved: no error, and a p99 that may
// exceed the usual bound only by the stalled rounds (stallLetGo), as their
// requests wait for a decode connection while the stalled streams hold
// them all. pdlb must let the stalled streams go within seconds: the
// decode's requests in flight fall back to the well-behaved clients' within
// stallLetGo, while the attacker still holds its connections (a stream let
// go only at the 60 s write timeout would keep them there).
func stalledStreams(a *arena) {
	var conns connSet
	defer conns.closeAll()
	raw := request("/generate", nil, `{"text":"a client that never reads","sampling_params":{"max_new_tokens":1000000},"stream":true}`)
	start := time.Now()
	for i := range a.form.stalledStreams {
		c, err := dialSmallWindow(a.env.addr)
		if err == nil {
			_, err = io.WriteString(c, raw)
			conns.add(c)
		}
		if err != nil {
			a.Fatalf("cannot send stalled stream %d: %v", i, err)
		}
	}
	var peak, n int64
	if pollUntil(start.Add(stallLetGo(a.form)), func() bool {
		n = a.env.fakeStats(a.env.decode).InFlight
		peak = max(peak, n)
		return peak >= stallPool && n <= int64(len(wellBehaved))
	}) {
		a.Logf("the decode's requests in flight peaked at %d, and fell to %d %v after the stalled streams started",
			peak, n, time.Since(start).Round(time.Millisecond))
	} else {
		a.Errorf("%v after %d streams stalled, the decode still had %d requests in flight (peak %d); want at most %d",
			stallLetGo(a.form), a.form.stalledStreams, n, peak, len(wellBehaved))
	}
	<-time.After(time.Until(start.Add(a.form.hold)))
}

// droppedBatches (item 8) sends form.droppedBatches /generate batches of 64
// prompts, each asking for a minute of tokens, evenly over form.hold, each
// on a connection closed as soon as its request is sent. pdlb must stop
// them at the workers (they leave the workers within dropDrainTimeout, not
// a minute later), with at most abortCallsPerDrop abort calls per worker
// per dropped batch (the fakes count them); and its descriptors stay under
// the limit (the harness checks).
func droppedBatches(a *arena) {
	pd := []string{a.env.prefill, a.env.decode}
	before := make([]uint64, len(pd))
	for i, w := range pd {
		before[i] = a.env.fakeStats(w).AbortRequest
	}
	pace := time.NewTicker(a.form.hold / time.Duration(a.form.droppedBatches))
	defer pace.Stop()
	for i := range a.form.droppedBatches {
		c, err := dial(a.env.addr)
		if err == nil {
			_, err = io.WriteString(c, request("/generate", nil, batchBody(i, batchItems, 60_000)))
			c.Close()
		}
		if err != nil {
			a.Errorf("cannot send dropped batch %d: %v", i, err)
		}
		<-pace.C
	}
	a.waitDrained(pd)
	for i, w := range pd {
		got := a.env.fakeStats(w).AbortRequest - before[i]
		a.Logf("the worker at %s got %d abort calls for %d dropped batches", w, got, a.form.droppedBatches)
		if bound := uint64(a.form.droppedBatches * abortCallsPerDrop); got > bound {
			a.Errorf("the worker at %s got %d abort calls for %d dropped batches of %d; want at most %d",
				w, got, a.form.droppedBatches, batchItems, bound)
		}
	}
}

// waitDrained waits until the workers at addrs have no more requests in
// flight than the well-behaved clients could have there.
func (a *arena) waitDrained(addrs []string) {
	var n int64
	if !pollUntil(time.Now().Add(dropDrainTimeout), func() bool {
		n = 0
		for _, w := range addrs {
			n += a.env.fakeStats(w).InFlight
		}
		return n <= int64(len(wellBehaved)*len(addrs))
	}) {
		a.Errorf("%v after the last dropped batch, the workers still had %d requests in flight", dropDrainTimeout, n)
	}
}

// batchBody is the /generate batch number seq of n prompts, each asking for
// tokens, and each named by a rid of its own: pdlb aborts a request the
// client named.
func batchBody(seq, n, tokens int) string {
	b := []byte(`{"text":[`)
	for i := range n {
		b = fmt.Appendf(b, `"dropped prompt %d",`, i)
	}
	b = append(b[:len(b)-1], `],"rid":[`...)
	for i := range n {
		b = fmt.Appendf(b, `"hostile-drop-%d-%d",`, seq, i)
	}
	return string(fmt.Appendf(b[:len(b)-1], `],"sampling_params":{"max_new_tokens":%d}}`, tokens))
}
