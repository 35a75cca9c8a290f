package lb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/lb/wire"
)

// SGLang decodes between 2026-03-18 and PR #22990 fail every request that
// carries disagg_prefill_dp_rank until a request without it has made them
// cache the prefill's parallel info (package bootstrap's documentation:
// DP ranks and the first-request bug; each decode DP rank has a cache of
// its own). The warmer sends that request itself: one tiny
// generation per decode DP rank through each prefill × decode pair, at
// startup and whenever the pair may have gone cold: the prefill came back or
// changed (a new registry generation), or the decode may have restarted (a
// new epoch: it failed a probe, refused or dropped a connection; see
// restart.go). A request that tells a decode a prefill DP rank waits for its
// pair to be warm.

// coldPairMarker is how an affected decode says it has not cached the
// prefill's info.
var coldPairMarker = []byte("is healthy before, but now it is down")

// warmupBody is the tiny generation that makes a decode cache a prefill's
// info: no DP-rank hint, one token.
const warmupBody = `{"input_ids":[1],"sampling_params":{"max_new_tokens":1,"temperature":0}}`

// warmer keeps the pairs warm. It is nil when warm-up is turned off.
type warmer struct {
	s *Server
	// pairs are the pairs of the pools' members, replaced whole when a
	// worker joins or leaves (copy on write, under pairsMu): the request
	// path looks its pair up without a lock.
	pairs   atomic.Pointer[pairTable]
	pairsMu sync.Mutex
	timeout time.Duration

	ok, failed *metrics.Counter
}

// pairTable holds the pairs by prefill and decode; never modified once
// published.
type pairTable map[pairKey]*pair

type pairKey struct{ p, d *Backend }

// pair is the warm-up state of one prefill × decode pair.
type pair struct {
	p, d *Backend
	// warmth is what the pair was last warmed for; nil when cold.
	warmth atomic.Pointer[warmth]

	mu      sync.Mutex
	running chan struct{} // closed when the running warm-up ends; nil if none runs
	// again has the running warm-up run once more, if the pair is still
	// cold when it ends: it read the workers before a sign that one
	// restarted (startAfresh).
	again    bool
	lastErr  error
	failedAt time.Time // when lastErr was set
}

// warmth records a successful warm-up.
type warmth struct {
	generation uint64 // the prefill's registry generation
	epoch      uint64 // the decode's connection epoch
	at         time.Time
}

func newWarmer(s *Server) *warmer {
	w := &warmer{
		s:       s,
		timeout: s.cfg.WarmupTimeout,
		ok:      s.ms.NewCounter(`pdlb_warmups_total{result="ok"}`),
		failed:  s.ms.NewCounter(`pdlb_warmups_total{result="failed"}`),
	}
	t := pairTable{}
	for _, p := range s.prefills.backends() {
		for _, d := range s.decodes.backends() {
			t[pairKey{p, d}] = &pair{p: p, d: d}
		}
	}
	w.pairs.Store(&t)
	s.ms.NewGauge(`pdlb_warm_pairs`, func() float64 {
		n := 0
		for _, pr := range *w.pairs.Load() {
			if w.isWarm(pr) {
				n++
			}
		}
		return float64(n)
	})
	return w
}

// pair returns the pair of p and d. A pair of a worker that left since
// the request read its pool is a cold one of its own, which nothing keeps.
func (w *warmer) pair(p, d *Backend) *pair {
	if pr := (*w.pairs.Load())[pairKey{p, d}]; pr != nil {
		return pr
	}
	return &pair{p: p, d: d}
}

// pairsOf returns b's pairs: a prefill's in its decodes' order, a
// decode's in its prefills'.
func (w *warmer) pairsOf(b *Backend) []*pair {
	t := *w.pairs.Load()
	var out []*pair
	if b.role == rolePrefill {
		for _, d := range w.s.decodes.backends() {
			if pr := t[pairKey{b, d}]; pr != nil {
				out = append(out, pr)
			}
		}
		return out
	}
	for _, p := range w.s.prefills.backends() {
		if pr := t[pairKey{p, b}]; pr != nil {
			out = append(out, pr)
		}
	}
	return out
}

// join gives b, which joined its pool, its pairs with the other pool's
// members, kept if it had them (taken back while it drained); leave
// drops them. Only prefills and decodes have pairs. A decode's new pairs
// are warmed at once with the prefills the registry has ready, as a
// prefill's are when the registry reads it ready (prewarm): nothing else
// would warm them before keepWarm's next round, and the first request
// that needs one warm would wait for its warm-up.
func (w *warmer) join(b *Backend) {
	w.change(b, true)
	if b.role != roleDecode {
		return
	}
	for _, pr := range w.pairsOf(b) {
		if w.s.registry.State(pr.p.index).Ready && !w.isWarm(pr) {
			w.start(pr)
		}
	}
}

func (w *warmer) leave(b *Backend) { w.change(b, false) }

func (w *warmer) change(b *Backend, joins bool) {
	var others []*Backend
	switch b.role {
	case rolePrefill:
		others = w.s.decodes.backends()
	case roleDecode:
		others = w.s.prefills.backends()
	default:
		return
	}
	w.pairsMu.Lock()
	defer w.pairsMu.Unlock()
	t := maps.Clone(*w.pairs.Load())
	if !joins {
		maps.DeleteFunc(t, func(k pairKey, _ *pair) bool { return k.p == b || k.d == b })
	}
	for _, o := range others {
		k := pairKey{b, o}
		if b.role == roleDecode {
			k = pairKey{o, b}
		}
		if _, ok := t[k]; joins && !ok {
			t[k] = &pair{p: k.p, d: k.d}
		}
	}
	w.pairs.Store(&t)
}

// isWarm reports whether pr was warmed for the prefill and decode as they
// are now.
func (w *warmer) isWarm(pr *pair) bool {
	wm := pr.warmth.Load()
	return wm != nil && wm.generation == w.s.registry.State(pr.p.index).Generation && wm.epoch == pr.d.epoch.Load()
}

// failing reports whether pr is cold, its last warm-up failed, and none
// ran when asked. A warm-up that is due starts in the background (warmSoon).
func (w *warmer) failing(pr *pair) bool {
	pr.mu.Lock()
	failed := pr.running == nil && pr.lastErr != nil
	pr.mu.Unlock()
	return !w.warmSoon(pr) && failed
}

// warmSoon reports whether pr is warm. A cold pair is warmed in the
// background if a warm-up is due (retryDue); nothing waits for it.
func (w *warmer) warmSoon(pr *pair) bool {
	if w.isWarm(pr) {
		return true
	}
	if w.retryDue(pr) {
		w.start(pr)
	}
	return false
}

// failedRetryAfter is how long a pair whose warm-up failed is left before
// pdlb warms it again unasked (requests that need it warm still ask).
const failedRetryAfter = 30 * time.Second

// retryDue reports whether a warm-up of pr may start unasked: none runs,
// and the last one did not fail within failedRetryAfter.
func (w *warmer) retryDue(pr *pair) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.running == nil && (pr.lastErr == nil || w.s.cfg.Now().Sub(pr.failedAt) >= failedRetryAfter)
}

// markCold forgets that pr was warm: its decode showed it was not.
func (pr *pair) markCold() { pr.warmth.Store(nil) }

// ensure returns once pr is warm, warming it if need be (one warm-up at a
// time per pair, shared by every request that waits), or an error when it
// cannot be warmed by deadline or within the warm-up timeout, or when the
// client, on conn, goes away meanwhile (errClientGone): a request whose
// client left must not be sent once the pair is warm.
func (w *warmer) ensure(pr *pair, deadline time.Time, conn net.Conn) error {
	if w.isWarm(pr) {
		return nil
	}
	gone := wire.WatchClient(conn)
	defer gone.Stop()
	wait := time.NewTimer(min(time.Until(deadline), w.timeout))
	defer wait.Stop()
	// Twice at most: the pair may go cold again while a warm-up runs.
	for range 2 {
		if w.isWarm(pr) {
			return nil
		}
		select {
		case <-w.start(pr):
		case <-gone.Gone:
			return errClientGone
		case <-w.s.cut:
			return errShutdown
		case <-wait.C:
			why := "its warm-up is still running"
			if st := w.s.registry.State(pr.p.index); !st.Ready {
				why = "the prefill's bootstrap server is not ready: " + st.Err
			}
			return fmt.Errorf("pair prefill %s × decode %s is not warm yet (%s); retry later", pr.p.url, pr.d.url, why)
		}
		pr.mu.Lock()
		err := pr.lastErr
		pr.mu.Unlock()
		if err != nil {
			return fmt.Errorf("cannot warm pair prefill %s × decode %s: %w", pr.p.url, pr.d.url, err)
		}
	}
	if w.isWarm(pr) {
		return nil
	}
	return fmt.Errorf("pair prefill %s × decode %s keeps going cold", pr.p.url, pr.d.url)
}

// start starts a warm-up of pr unless one runs, and returns the channel
// closed when it ends.
func (w *warmer) start(pr *pair) <-chan struct{} {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.running != nil {
		return pr.running
	}
	return w.launch(pr)
}

// startAfresh starts a warm-up of pr that reads its workers as they are
// now: at once, or when the running one ends, which read them before (its
// warmth would be stale: the pair would stay cold, with nothing left to
// warm it but keepWarm's next round).
func (w *warmer) startAfresh(pr *pair) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.running != nil {
		pr.again = true
		return
	}
	w.launch(pr)
}

// launch starts a warm-up of pr, none running; pr.mu is held.
func (w *warmer) launch(pr *pair) <-chan struct{} {
	done := make(chan struct{})
	pr.running = done
	w.s.bg.Go(func() { w.run(pr, done) })
	return done
}

// run warms pr, once more each time it was asked to meanwhile (again) and
// the pair is still cold, then closes done.
func (w *warmer) run(pr *pair, done chan struct{}) {
	for {
		err := w.warm(pr)
		pr.mu.Lock()
		pr.lastErr = err
		if err != nil {
			pr.failedAt = w.s.cfg.Now()
		}
		again := pr.again && !w.isWarm(pr)
		pr.again = false
		if !again {
			pr.running = nil
		}
		pr.mu.Unlock()
		if !again {
			close(done)
			return
		}
	}
}

// prewarm starts warming every pair of prefill p.
func (w *warmer) prewarm(p *Backend) {
	for _, pr := range w.pairsOf(p) {
		if !w.isWarm(pr) {
			w.start(pr)
		}
	}
}

// keepWarm warms again, every interval, the pairs that went cold while
// both their workers are available: a decode that restarted (a new epoch)
// or came back up, whose pairs no request has warmed since. A pair whose
// warm-up failed is left failedRetryAfter before the next try.
func (w *warmer) keepWarm(interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-done:
			return
		}
		for _, pr := range *w.pairs.Load() {
			if w.s.registry.State(pr.p.index).Ready && pr.p.available() && pr.d.available() {
				w.warmSoon(pr)
			}
		}
	}
}

// warm sends the warm-up generation through pr for each DP rank of its
// decode, once the prefill's bootstrap server is ready.
func (w *warmer) warm(pr *pair) error {
	ctx, cancel := context.WithTimeout(w.s.ctx, w.timeout)
	defer cancel()
	st, err := w.s.registry.WaitReady(ctx, pr.p.index)
	if err != nil {
		w.failed.Inc()
		return fmt.Errorf("bootstrap server of prefill %s not ready: %s", pr.p.url, w.s.registry.State(pr.p.index).Err)
	}
	epoch := pr.d.epoch.Load()
	ranks := pr.d.learnDPSize(ctx, w.s.cfg.Now)
	deadline, _ := ctx.Deadline()
	for r := range ranks {
		if err := w.generate(pr, st, r, ranks > 1, deadline); err != nil {
			w.failed.Inc()
			pr.d.log.Warn().Str("prefill", pr.p.addr).Int("decode_dp_rank", r).Err(err).Msg("pair warm-up failed")
			return err
		}
	}
	pr.warmth.Store(&warmth{generation: st.Generation, epoch: epoch, at: w.s.cfg.Now()})
	w.ok.Inc()
	pr.d.log.Info().Str("prefill", pr.p.addr).Int("decode_dp_ranks", ranks).Msg("pair warmed")
	return nil
}

// generate sends the warm-up body through the pair, to decode DP rank
// decodeRank when routed, and reports whether the decode answered 200.
func (w *warmer) generate(pr *pair, st *bootstrap.State, decodeRank int, routed bool, deadline time.Time) error {
	s := w.s
	x := s.acquireExchange()
	s.live.Add(1)
	x.refs.Store(3)
	x.rt = s.routes["/generate"]
	x.requestID = append(x.requestID[:0], "pdlb-warmup"...)
	x.rooms = append(x.rooms[:0], s.newRoom())
	f := bootstrap.Fields{Host: pr.p.bootstrapHost, Port: st.Port, Rooms: x.rooms}
	x.prefillBody = mustAppend(x.prefillBody[:0], []byte(warmupBody), f)
	x.body = x.body[:0]
	if routed {
		f.RoutedDPRank = bootstrap.DPRank{Set: true, Rank: decodeRank}
		x.body = mustAppend(x.body, []byte(warmupBody), f)
	} else {
		x.body = append(x.body, x.prefillBody...)
	}
	uri := []byte("/generate")
	x.prefill.target(pr.p, uri, x.prefillBody, deadline, x.requestID)
	x.decode.target(pr.d, uri, x.body, deadline, x.requestID)
	go x.runPrefill()
	x.decode.run()
	<-x.decode.done
	err := warmupFailure(x)
	x.unref()
	return err
}

// warmupFailure is why x, a warm-up, failed, nil if it did not: the decode
// alone says whether it did, as only its answer shows it cached the
// prefill's info. A decode cancelled because its prefill failed gives the
// prefill's reason (a refused key, a 5xx, an abort), not its own
// cancellation, which would blame it.
func warmupFailure(x *exchange) error {
	c := &x.decode
	if c.err == nil && c.resp.StatusCode() == fasthttp.StatusOK {
		return nil
	}
	var peer *errPeerFailed
	if errors.As(c.err, &peer) && peer.role == rolePrefill {
		<-x.prefill.done
		if x.prefill.err != nil || x.prefill.resp.StatusCode() != fasthttp.StatusOK {
			c = &x.prefill
		}
	}
	_, _, msg := c.describe()
	return errors.New(msg)
}

// pairStatus is one pair's line in /bootstrap.
type pairStatus struct {
	Decode   string     `json:"decode"`
	Warm     bool       `json:"warm"`
	WarmedAt *time.Time `json:"warmed_at,omitempty"`
	Error    string     `json:"error,omitempty"`
}

func (w *warmer) status(p *Backend) []pairStatus {
	prs := w.pairsOf(p)
	out := make([]pairStatus, 0, len(prs))
	for _, pr := range prs {
		ps := pairStatus{Decode: pr.d.url, Warm: w.isWarm(pr)}
		if wm := pr.warmth.Load(); wm != nil {
			at := wm.at
			ps.WarmedAt = &at
		}
		pr.mu.Lock()
		if pr.lastErr != nil {
			ps.Error = pr.lastErr.Error()
		}
		pr.mu.Unlock()
		out = append(out, ps)
	}
	return out
}
