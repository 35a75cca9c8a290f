package fake

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// abortMessage is SGLang's reason for a request ended by /abort_request.
const abortMessage = "Aborted by AbortReq."

// call is an in-flight generate request, which /abort_request, or its
// client going away, ends by closing done. Every wait of the request also
// ends when the server closes.
type call struct {
	done chan struct{}
	once sync.Once
	gone atomic.Bool // ended because its client went away
}

func newCall() *call { return &call{done: make(chan struct{})} }

// abort ends the call; it reports whether this was the first abort.
func (c *call) abort() bool { return c.end(false) }

// end ends the call, recording whether its client went away, unless it
// was ended before; it reports whether this was the first end.
func (c *call) end(gone bool) bool {
	first := false
	c.once.Do(func() {
		c.gone.Store(gone)
		close(c.done)
		first = true
	})
	return first
}

// failure is how a request ended early.
type failure struct {
	item    int // index of the item that failed
	msg     string
	aborted bool // ended by /abort_request or Close: an abort finish_reason, no error status
}

func abortedAt(item int) *failure {
	return &failure{item: item, msg: abortMessage, aborted: true}
}

// serveGenerate answers /generate, /v1/completions and /v1/chat/completions:
// meet the faults set on arrival, parse, refuse DP ranks out of range and
// roomless PD requests, dispatch to DP ranks, meet the other leg, generate,
// answer. The request is watched for its client going away from its
// arrival until its answer is written; a stream takes the watch over, as
// fasthttp does not read the connection between the handler's return and
// the stream's end.
func (s *Server) serveGenerate(ctx *fasthttp.RequestCtx, rt route) {
	if !ctx.IsPost() && (rt != routeGenerate || !ctx.IsPut()) {
		methodNotAllowed(ctx)
		return
	}
	c := newCall()
	w := s.watch(ctx.Conn(), c)
	r := s.accept(ctx, rt, c)
	if r != nil && r.stream {
		s.startStream(ctx, r, c, w) // the stream untracks c and ends the watch
		return
	}
	defer w.unwatch()
	if r != nil {
		s.answer(ctx, r, c)
	}
}

// answer serves a non-stream request: meet the other leg, generate, answer.
func (s *Server) answer(ctx *fasthttp.RequestCtx, r *request, c *call) {
	defer s.untrack(r, c)
	f := s.transfer(r, c)
	if f == nil && !s.generate(r, c) {
		f = abortedAt(0)
	}
	var h holder
	if s.interrupt(ctx.Conn(), c, wholeAnswer, &h) {
		s.writeAnswer(ctx, r, f)
	}
}

// accept lets a generate request in, to be served as c: it meets the
// faults set on arrival, then parses the request and refuses what SGLang
// refuses before any work (a bad body, a DP rank out of range, a PD
// request without a room), then dispatches it to DP ranks and tracks it.
// It returns nil once it has answered.
func (s *Server) accept(ctx *fasthttp.RequestCtx, rt route, c *call) *request {
	if !s.admit(ctx, c) {
		return nil
	}
	r, err := s.parse(rt, ctx.PostBody())
	if err == nil {
		err = applyDPRankHeader(r, ctx.Request.Header.Peek(HeaderDPRank))
	}
	if err != nil {
		writeBadRequest(ctx, rt, err.Error())
		return nil
	}
	s.st.generateRequests.Add(1)
	if msg := s.checkRanks(r); msg != "" {
		s.rejectBadRank(ctx, r, msg)
		return nil
	}
	if it := s.roomless(r); it != nil {
		s.st.rejectedNoRoom.Add(1)
		s.rejectNoRoom(ctx, r, it)
		return nil
	}
	s.dispatch(r)
	s.track(r, c)
	return r
}

// roomless returns the first item without a bootstrap_room when the server
// is a prefill or decode, which refuse such requests (rejectNoRoom),
// unless the decode prefills that item itself (local.go).
func (s *Server) roomless(r *request) *item {
	if s.cfg.Role == RoleAggregated {
		return nil
	}
	for i := range r.items {
		if !r.items[i].hasRoom && !r.items[i].local {
			return &r.items[i]
		}
	}
	return nil
}

// transfer does the work before the first token: a prefill computes then
// hands its KV cache over, a decode takes room for the item's KV and waits
// for it (or computes the items it prefills itself), an aggregated server
// computes.
func (s *Server) transfer(r *request, c *call) *failure {
	switch s.cfg.Role {
	case RolePrefill:
		return s.eachItem(r, func(it *item) *failure { return s.prefillItem(c, it) })
	case RoleDecode:
		deadline := r.start.Add(s.cfg.KVTimeout)
		return s.eachItem(r, func(it *item) *failure { return s.decodeItem(c, r, it, deadline) })
	}
	return s.eachItem(r, func(it *item) *failure {
		if !s.compute(c, it) {
			return abortedAt(it.index)
		}
		return nil
	})
}

// prefillItem is a prefill's work on it: SGLang's KV sender refuses a DP
// rank conflict at once, before any compute; else the prefill computes the
// prompt, then hands its KV cache over.
func (s *Server) prefillItem(c *call, it *item) *failure {
	if f := s.conflict(it); f != nil {
		return f
	}
	if !s.compute(c, it) {
		return abortedAt(it.index)
	}
	return s.sendKV(c, it)
}

// eachItem runs f on every item, concurrently when there are several, and
// returns the failure of the lowest item index, if any.
func (s *Server) eachItem(r *request, f func(*item) *failure) *failure {
	if len(r.items) == 1 {
		return f(&r.items[0])
	}
	fails := make([]*failure, len(r.items))
	var wg sync.WaitGroup
	for i := range r.items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fails[i] = f(&r.items[i])
		}()
	}
	wg.Wait()
	for _, fl := range fails {
		if fl != nil {
			return fl
		}
	}
	return nil
}

// generate spends the time of a non-stream generation, in its ranks'
// decode batches; it reports false if the call was aborted meanwhile.
func (s *Server) generate(r *request, c *call) bool {
	n := s.steps(r)
	s.startDecoding(r)
	defer s.stopDecoding(r)
	if s.cfg.TokenGate == nil && s.cfg.BatchTokenDelay == 0 {
		return s.pause(c, time.Duration(n)*s.cfg.TokenDelay)
	}
	for range n {
		if !s.nextToken(c, r) {
			return false
		}
	}
	return true
}

// steps is the number of token steps of a request: its longest item's.
func (s *Server) steps(r *request) int {
	n := 0
	for i := range r.items {
		n = max(n, s.tokensOf(&r.items[i]))
	}
	return n
}

// tokensOf is the number of tokens the server generates for it: a prefill
// generates none of its own: its answer ends with finish_reason
// {"type": "length", "length": 0}.
func (s *Server) tokensOf(it *item) int {
	if s.cfg.Role == RolePrefill {
		return 0
	}
	return it.maxTokens
}

// nextToken waits for the next token step of r: TokenGate, else its
// tokenDelay. It reports false if the call was aborted or the server
// closed.
func (s *Server) nextToken(c *call, r *request) bool {
	g := s.cfg.TokenGate
	if g == nil {
		return s.pause(c, s.tokenDelay(r))
	}
	select {
	case <-g:
		return true
	case <-c.done:
	case <-s.quit:
	}
	return false
}

// pause waits d; it reports false if the call was aborted or the server
// closed first.
func (s *Server) pause(c *call, d time.Duration) bool {
	if d <= 0 {
		return !s.stopped(c)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
	case <-s.quit:
	}
	return false
}

// stopped reports whether c was aborted or the server closed.
func (s *Server) stopped(c *call) bool {
	select {
	case <-c.done:
		return true
	case <-s.quit:
		return true
	default:
		return false
	}
}

// track registers r, served as c, as in flight under the rids of its
// items.
func (s *Server) track(r *request, c *call) {
	for i := range r.items {
		s.calls.Store(r.items[i].rid, c)
	}
	s.st.inFlight.Add(1)
}

// untrack undoes track, once the request is over, and gives back the KV
// tokens its items held.
func (s *Server) untrack(r *request, c *call) {
	s.release(r)
	for i := range r.items {
		s.calls.CompareAndDelete(r.items[i].rid, c)
	}
	s.st.inFlight.Add(-1)
	if c.gone.Load() {
		s.clientGone(r.rid)
	}
}

// clientGone counts a generate request ended because its client went
// away, rid "" for one held by FaultHang, never parsed, and tells
// Config.OnClientGone.
func (s *Server) clientGone(rid string) {
	s.st.clientGone.Add(1)
	if h := s.cfg.OnClientGone; h != nil {
		h(rid)
	}
}

// writeAnswer writes the non-stream answer: the route's body, or the
// SGLang 500 a failed KV transfer gives on every route.
func (s *Server) writeAnswer(ctx *fasthttp.RequestCtx, r *request, f *failure) {
	if f != nil && !f.aborted {
		writeServerError(ctx, f.msg)
		return
	}
	b := s.appendAnswer(s.getBuf(), r, f)
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}
