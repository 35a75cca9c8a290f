package lb

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// clientRequest is a client's generate request across the attempts pdlb
// makes to answer it. It lives on the handler's stack.
type clientRequest struct {
	ctx *fasthttp.RequestCtx
	rt  *route
	// body is the client's body, less a leading byte-order mark (see
	// serveGenerate).
	body     []byte
	info     bootstrap.Request
	id       []byte
	start    time.Time
	deadline time.Time
	// permit is held while the request counts against
	// --max-concurrent-requests; whoever answers releases it.
	permit bool
	// prefillRank and decodeRank are the DP ranks the request's prefill
	// and decode must have, -1 for any (see rankNeeds).
	prefillRank, decodeRank int

	// unreachable are workers that could not be reached for this request:
	// never picked again. failed are workers that failed it otherwise (a
	// 5xx, a reset): avoided while others are available. why tells what
	// happened, for the answer when nothing is left. They stay nil, and
	// cost nothing, on the common path.
	unreachable, failed []*Backend
	why                 string
}

// serveGenerate is the path shared by /generate, /v1/completions and
// /v1/chat/completions: PD, or decode-only when the request or the state
// of the pools asks for it (fallback.go).
func (s *Server) serveGenerate(ctx *fasthttp.RequestCtx, rt *route, requestID []byte, start time.Time) {
	q := clientRequest{ctx: ctx, rt: rt, id: requestID, start: start}
	q.deadline = q.start.Add(s.cfg.RequestTimeout)
	if enc := ctx.Request.Header.ContentEncoding(); len(enc) > 0 && !bytes.EqualFold(enc, identity) {
		// pdlb reads the body to route it, and SGLang's workers would not
		// decode it either: a compressed body is refused by name, not as
		// JSON that does not parse.
		closeUnread(ctx)
		s.answerError(&q, &answerError{fasthttp.StatusUnsupportedMediaType, reasonInvalidRequest,
			"Content-Encoding " + strconv.Quote(string(enc)) + " is not supported: send the body uncompressed"})
		return
	}
	var body bodyBuffer
	defer body.release(s.memory)
	if aerr := s.readBody(ctx, &body, s.cfg.MaxRequestBodySize, "(--max-payload-size)"); aerr != nil {
		s.answerError(&q, aerr)
		return
	}
	// Python's json.loads, which SGLang's workers and mini_lb read bodies
	// with, takes UTF-8 bytes that begin with a byte-order mark, as some
	// Windows tools write them. So does pdlb; the workers get the body
	// without it.
	q.body = bytes.TrimPrefix(body.buf, utf8BOM)
	var err error
	if q.info, err = bootstrap.Parse(q.body); err == nil {
		err = applyDPRankHeader(&q)
	}
	if err == nil && isBatch(rt, q.info) && q.info.Batch > s.cfg.MaxBatchSize {
		err = fmt.Errorf("a batch of %d items is more than the %d allowed (--max-batch-size)", q.info.Batch, s.cfg.MaxBatchSize)
	}
	if err != nil {
		s.answerError(&q, &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest, badBodyMessage(ctx, err)})
		return
	}
	q.prefillRank, q.decodeRank = s.rankNeeds(&q)
	if aerr := s.admit(&q); aerr != nil {
		s.answerError(&q, aerr)
		return
	}
	why, aerr := s.decodeOnlyReason(&q)
	switch {
	case aerr != nil:
		s.answerError(&q, aerr)
	case why != pdMode:
		s.serveDecodeOnly(&q, why)
	default:
		s.servePD(&q)
	}
}

var (
	utf8BOM  = []byte("\xef\xbb\xbf")
	identity = []byte("identity")
)

// headerDPRank is routed_dp_rank on SGLang's OpenAI routes, taken over the
// body's (see package bootstrap's documentation, DP ranks). pdlb forwards it,
// so it plans the request with the rank the workers will see, and the prefill
// sees the rank pdlb picks.
var headerDPRank = []byte("X-Data-Parallel-Rank")

// applyDPRankHeader takes an X-Data-Parallel-Rank header on an OpenAI route
// as the request's routed_dp_rank, refusing one that is not an integer
// before any worker does.
func applyDPRankHeader(q *clientRequest) error {
	h := q.ctx.Request.Header.PeekBytes(headerDPRank)
	if h == nil || q.rt.batch { // /generate ignores it
		return nil
	}
	rank, err := strconv.Atoi(string(bytes.TrimSpace(h)))
	if err != nil {
		return fmt.Errorf("invalid X-Data-Parallel-Rank header: must be an integer, got '%s'", h)
	}
	q.info.RoutedDPRank = bootstrap.DPRank{Set: true, Rank: rank}
	return nil
}

// pick chooses a worker of pool for q's next attempt, with DP rank rank
// (-1 for any): one that has not failed q if possible, never one q could
// not reach.
func (q *clientRequest) pick(pool *Pool, rank int) *Backend {
	if len(q.failed) > 0 {
		both := append(slices.Clip(q.unreachable), q.failed...)
		if b := pool.pick(both, rank, q); b != nil {
			return b
		}
	}
	return pool.pick(q.unreachable, rank, q)
}

// remember records a failed attempt, so the next one goes elsewhere.
func (q *clientRequest) remember(out outcome) {
	switch out.retry {
	case retryUnreachable:
		q.unreachable = append(q.unreachable, out.backend)
	case retryFailed:
		q.failed = append(q.failed, out.backend)
		if out.peer != nil {
			q.failed = append(q.failed, out.peer)
		}
	}
	q.explain(out.why)
}

// explain adds why to what the answer says when nothing is left to try.
func (q *clientRequest) explain(why string) {
	if why != "" {
		if q.why != "" {
			q.why += "; "
		}
		q.why += why
	}
}

// servePD pairs a prefill and a decode for q, trying again on a warmed
// pair, or on other workers, while nothing has reached the client.
func (s *Server) servePD(q *clientRequest) {
	cold, rechecked, relearned := false, false, false
	for attempt := 0; ; attempt++ {
		p := s.pickPrefill(q)
		if p == nil {
			s.noWorkerFor(q, s.prefills, q.prefillRank, noPrefill)
			return
		}
		d := q.pick(s.decodes, q.decodeRank)
		if d == nil && !relearned && s.relearnDecodes(q) {
			relearned = true
			d = q.pick(s.decodes, q.decodeRank)
		}
		if d == nil {
			s.noWorkerFor(q, s.decodes, q.decodeRank, noDecode)
			return
		}
		plan, aerr := s.planDP(q.info, q.rt, p, d, q.deadline, q.ctx.Conn())
		if p.leaving.Load() || d.leaving.Load() {
			// Removed while the plan waited for their pair's warm-up: the
			// drain does not wait for a request not yet sent, and a planned
			// change must fail none. Pick again among the members; no
			// retry is spent (a pick never takes a worker leaving, so this
			// repeats at most once a removal).
			plan.release()
			attempt--
			continue
		}
		if aerr != nil {
			s.answerError(q, aerr)
			return
		}
		held := rewriteSize(q, p.bootstrapHost, plan.hint)
		if !s.memory.take(held) {
			plan.release()
			s.answerError(q, s.memory.exhausted())
			return
		}
		x := s.newExchange(q, 3)
		x.held = held
		x.plan = plan
		x.coldRetry = !cold && s.warm != nil
		x.rankRetry = !rechecked
		x.mayRetry = attempt < s.cfg.MaxRetries
		x.preparePD(q, p, d)
		// What the attempt went by, should a worker refuse its DP rank.
		seen, seenDecode := s.registry.State(p.index), d.dpReads.Load()
		out := x.serve(q)
		x.unref() // the handler's reference (see exchange)
		if out.retry == answered {
			return
		}
		cold = cold || out.retry == retryCold
		rechecked = rechecked || out.retry == retryStaleRank
		s.beforeRetryPD(q, out, p, d, seen, seenDecode)
	}
}

// beforeRetryPD acts on the failure (out) of q's attempt on prefill p and
// decode d before the next attempt. seen and seenDecode are what the
// attempt knew of p's and d's DP ranks.
func (s *Server) beforeRetryPD(q *clientRequest, out outcome, p, d *Backend, seen *bootstrap.State, seenDecode uint64) {
	switch out.retry {
	case retryCold:
		// The decode had not cached the prefill's info: it restarted, or
		// a warm-up missed it; or it may have restarted, and the request
		// was not sent (redial). Warm the pair and try again.
		s.coldRetries.Inc()
		s.warm.pair(p, d).markCold()
	case retryStaleRank:
		// pdlb's own stale knowledge must not become the client's 400.
		s.staleRankRetries.Inc()
		if out.backend == p {
			s.recheckPrefill(p, seen, q.deadline)
		} else {
			s.relearnDecode(d, seenDecode, q.deadline)
		}
	default:
		s.retries.Inc()
		q.remember(out)
		if out.peer == p {
			// The decode's KV transfer from p failed: p may have
			// restarted with another bootstrap port or layout. The next
			// attempt avoids it; later requests need the registry to know
			// it anew without waiting for its round.
			s.registry.Poke(p.index)
		}
	}
}

// recheckPrefill has the registry read prefill p again, unless it has read
// it since State seen, and returns when it has (and its OnChange
// has updated what selection knows of p). servePD calls it when p refused
// the DP rank an attempt sent it: p has fewer ranks than the registry
// says, having restarted since the registry last read it (every 5 s),
// unless p's dp_size was unknown. The next attempt is placed by what the
// registry says now: on a rank p has, on another prefill, or answered with
// pdlb's own 400 when no prefill has the client's rank. Nothing has reached
// the client: the prefill refused at once, cancelling the decode before it
// had the KV cache. The one refresh that the many requests refused at once
// share costs a few bootstrap calls.
func (s *Server) recheckPrefill(p *Backend, seen *bootstrap.State, deadline time.Time) {
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	defer cancel()
	// A failed read leaves the prefill not ready, which the next attempt
	// goes by; the registry logs it.
	_ = s.registry.Recheck(ctx, p.index, seen)
}

// pickPrefill picks q's prefill. Before the registry's first read of its
// bootstrap server ends, a prefill counts as up (pdlb can serve at once),
// but a server that hangs keeps that read, and the KV transfers of the
// requests sent there, waiting: such a prefill is taken only when no other
// has the rank. So is any prefill whose server is not ready, for a request
// that tells the decode a prefill DP rank: it waits for its pair's warm-up,
// which needs that server. The policy picks once among the ready ones, and
// only if none is among all: a policy that records its picks (cache_aware)
// records the prefill the request goes to.
func (s *Server) pickPrefill(q *clientRequest) *Backend {
	waitsForWarmth := q.info.PrefillDPRank.Set && s.warm != nil
	var notReady []*Backend
	for _, b := range s.prefills.backends() {
		if st := s.registry.State(b.index); !st.Ready && (st.Updated.IsZero() || waitsForWarmth) {
			notReady = append(notReady, b)
		}
	}
	if len(notReady) > 0 && len(notReady) < len(s.prefills.backends()) {
		exclude := append(append(notReady, q.unreachable...), q.failed...)
		if ready := s.prefills.pick(exclude, q.prefillRank, q); ready != nil {
			return ready
		}
	}
	return q.pick(s.prefills, q.prefillRank)
}

// relearnDecodes reads again the dp_size of the decodes that pdlb knows
// lack q's rank, before pdlb refuses the rank as no decode's: one restarted
// with more ranks is known by its old dp_size until its pairs are warmed.
// A decode read within dpRereadInterval is not read again, so that a
// client's bad ranks cannot turn into a flood of reads. It reports whether
// it read any.
func (s *Server) relearnDecodes(q *clientRequest) bool {
	if q.decodeRank < 0 {
		return false
	}
	read := false
	for _, d := range s.decodes.backends() {
		n := int(d.dpSize.Load())
		if n == 0 || q.decodeRank < n || s.cfg.Now().Sub(time.Unix(0, d.dpReadAt.Load())) < dpRereadInterval {
			continue
		}
		s.relearnDecode(d, d.dpReads.Load(), q.deadline)
		read = true
	}
	return read
}

// dpRereadInterval is the least time between two reads of a decode's
// dp_size that a request's rank causes.
const dpRereadInterval = time.Second

// relearnDecode reads decode d's dp_size again when d refused the client's
// routed_dp_rank: pdlb did not know it (it learns it when warming d's
// pairs), or d restarted with fewer ranks since. The next attempt goes to a
// decode that has the rank, or gets pdlb's own 400 if none has. As with
// recheckPrefill, the requests refused at once share one read: none is
// made if d was read since seen (its count of reads then).
func (s *Server) relearnDecode(d *Backend, seen uint64, deadline time.Time) {
	d.dpReadMu.Lock()
	defer d.dpReadMu.Unlock()
	if d.dpReads.Load() != seen {
		return
	}
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	defer cancel()
	d.learnDPSize(ctx, s.cfg.Now)
}

// rewriteSize bounds the bytes of the bodies an attempt at q sends, the
// client's with pdlb's fields in for prefill host: one for both workers, or
// a second when the prefill's differs (a DP-rank hint). The attempt holds
// them in the body memory until its exchange is released.
func rewriteSize(q *clientRequest, host string, hint bool) int {
	items := -1
	if isBatch(q.rt, q.info) {
		items = q.info.Batch
	}
	n := len(q.body) + bootstrap.MaxAdded(host, items)
	if hint {
		n *= 2
	}
	return n
}
