package bench

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// Error kinds: the keys of Report.Errors, besides "status_<code>" for an
// answer with a non-2xx status.
const (
	// KindConnect is a failure to open a connection to the target.
	KindConnect = "connect"
	// KindTimeout is a request that did not end within Config.Timeout.
	KindTimeout = "timeout"
	// KindTransport is any other failure of the connection before the
	// answer's header was read.
	KindTransport = "transport"
	// KindStreamError is a stream that carried an {"error": ...} event, or
	// ended (or broke) before its "data: [DONE]", or whose response did not
	// end after it.
	KindStreamError = "stream_error"
	// KindBadBody is a 2xx answer that is not the JSON expected: a body or
	// stream event that does not parse, or a body with an "error" member.
	KindBadBody = "bad_body"
	// KindAborted is a 2xx answer, or stream event, that an abort ended: a
	// /generate finish_reason of type "abort" (SGLang's answer to an
	// aborted request, or a decode's refusal of one without a room), or an
	// OpenAI choice's finish_reason "abort".
	KindAborted = "aborted"
	// KindDropped is an open-loop arrival that was not sent because
	// Config.MaxInflight requests were in flight.
	KindDropped = "dropped"
)

// worker sends requests one at a time: a client of the closed loop, or
// one request slot of the open loop. It owns its request, response,
// buffers and figures, so the hot path shares nothing with other workers but
// the runner's atomics; the runner reads the figures once every request of
// a round has ended.
type worker struct {
	r      *runner
	req    fasthttp.Request
	resp   fasthttp.Response
	body   []byte
	pcg    rand.PCG
	rng    *rand.Rand // draws the sizes of a request, from pcg
	sse    sseReader
	parser fastjson.Parser
	gaps   []time.Duration // between token events of the current request
	lags   []time.Duration // of the stamped events of the current request
	msg    []byte          // what the current request's failure said
	errBuf []byte          // the start of a streamed error answer

	tally
	first time.Time // start of the round's first measured request
	last  time.Time // end of the round's last measured request
}

// tally is what a worker has measured. A copy (with its own errs) is a
// snapshot to go back to: appends after it do not change the elements it
// sees.
type tally struct {
	requests, ok int
	errs         map[string]int
	tokens       int64
	cache        cacheTally
	events       int64
	windowEvents int64 // arrived in a measured window, of streams that did not fail in it
	cutEvents    int64 // of measured streams an interrupt cut
	latency      []time.Duration
	ttft         []time.Duration
	itl          []time.Duration
	lag          []time.Duration
	busy         time.Duration // closed loop: first to last, summed over rounds
}

// snapshot returns a copy of t that later requests leave unchanged.
func (t *tally) snapshot() tally {
	s := *t
	s.errs = maps.Clone(t.errs)
	return s
}

// outcome is how one request went.
type outcome struct {
	kind   string    // error kind; empty for a success
	first  time.Time // arrival of the first token event; zero if none
	tokens int
	cache  cacheUse // what the answer says of the prefix cache
	events int      // stream events before [DONE], or before the stream failed
	// inWindow is how many of them arrived in the round's measured window.
	inWindow int
}

func newWorker(r *runner) *worker {
	w := &worker{r: r, tally: tally{errs: make(map[string]int)}}
	w.rng = rand.New(&w.pcg)
	w.req.Header.SetMethod(fasthttp.MethodPost)
	w.req.SetRequestURI(r.t.uri)
	w.req.Header.SetContentType("application/json")
	if r.wl.stream {
		w.req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
		w.resp.StreamBody = true // kept by HostClient.Do across requests
	}
	// A name's first value replaces the bench's own header of that name; a
	// name given again sends every value, as curl does (but for the headers
	// fasthttp keeps one of: Host, User-Agent, Content-Type, ...).
	given := make(map[string]bool, len(r.cfg.Headers))
	for _, h := range r.cfg.Headers {
		name := strings.ToLower(h[0])
		if name == "host" {
			// fasthttp sends the URL's host unless told otherwise.
			w.req.UseHostHeader = true
		}
		if given[name] {
			w.req.Header.Add(h[0], h[1])
		} else {
			w.req.Header.Set(h[0], h[1])
		}
		given[name] = true
	}
	return w
}

// one sends a request, records how it went, and returns its error kind
// (empty for a success, or a request the run cut).
func (w *worker) one(measured bool) (kind string) {
	seq := w.r.seq.Add(1)
	if w.r.wl.random() {
		w.r.wl.seedFor(&w.pcg, seq)
	}
	w.body = w.r.wl.appendBody(w.body[:0], seq, w.rng)
	w.req.SetBodyRaw(w.body)
	if key := w.r.wl.routingKey(seq); key != nil {
		w.req.Header.SetBytesV(RoutingKeyHeader, key)
	}
	start := time.Now()
	gen := w.r.streak.begin()
	o := w.exchange(start)
	end := time.Now()
	w.r.streak.end(gen)
	if o.kind == KindTimeout {
		// Rather than the deadline's "timeout", what it was.
		w.msg = fmt.Appendf(w.msg[:0], "did not end within %v", w.r.cfg.Timeout)
	}
	cut := w.r.ctx.Err() != nil
	if !cut {
		w.r.noteOutcome(o.kind, w.msg, end)
	}
	// Events/s counts what arrived within the window, of every stream
	// but those that failed inside it: one still in flight at the
	// window's end, or at the interrupt that ends it, had delivered them
	// within the measured time, whatever it did afterwards.
	if o.kind == "" || cut || !end.Before(w.r.measureEnd) {
		w.windowEvents += int64(o.inWindow)
	}
	switch {
	case cut:
		// Cut short, or racing the cut: not a figure, but for the events
		// it delivered (Report.Events).
		if measured {
			w.cutEvents += int64(o.events)
		}
		return ""
	case !measured:
		w.r.warm.Add(1)
	default:
		w.record(o, start, end)
	}
	return o.kind
}

// record adds one measured request to the figures.
func (w *worker) record(o outcome, start, end time.Time) {
	w.requests++
	if w.first.IsZero() {
		w.first = start
	}
	w.last = end
	w.r.done.Add(1)
	if o.kind != "" {
		w.errs[o.kind]++
		w.r.errLog.add(o.kind, w.msg)
		w.r.failed.Add(1)
		return
	}
	w.ok++
	w.tokens += int64(o.tokens)
	w.cache.add(o.cache)
	latency := end.Sub(start)
	w.latency = append(w.latency, latency)
	switch {
	case !w.r.wl.stream:
		w.ttft = append(w.ttft, latency)
	case !o.first.IsZero():
		w.ttft = append(w.ttft, o.first.Sub(start))
	}
	w.itl = append(w.itl, w.gaps...)
	w.events += int64(o.events)
	w.lag = append(w.lag, w.lags...)
}

// exchange sends the request and reads the whole answer.
func (w *worker) exchange(start time.Time) outcome {
	w.gaps, w.lags, w.msg = w.gaps[:0], w.lags[:0], w.msg[:0]
	err := w.r.t.hc.DoDeadline(&w.req, &w.resp, start.Add(w.r.cfg.Timeout))
	if err != nil {
		w.msg = appendErrorMessage(w.msg, err)
		return outcome{kind: transportKind(err)}
	}
	if code := w.resp.StatusCode(); code < 200 || code > 299 {
		w.msg = appendAnswerMessage(w.msg, &w.parser, w.errorBody())
		// Closing a stream not read to its end drops the connection;
		// error answers are rare enough not to matter.
		_ = w.resp.CloseBodyStream()
		return outcome{kind: "status_" + strconv.Itoa(code)}
	}
	if w.r.wl.stream {
		return w.readStream()
	}
	return w.readBody()
}

// errorBody returns the start of an error answer's body, at most
// maxErrorBody bytes of it when it is streamed.
func (w *worker) errorBody() []byte {
	body := w.resp.BodyStream()
	if body == nil {
		return w.resp.Body()
	}
	if w.errBuf == nil {
		w.errBuf = make([]byte, maxErrorBody)
	}
	n, _ := io.ReadFull(body, w.errBuf)
	return w.errBuf[:n]
}

// readBody checks a buffered answer and reads its output length.
func (w *worker) readBody() outcome {
	body := w.resp.Body()
	v, err := w.parser.ParseBytes(body)
	if err != nil {
		w.msg = appendAnswerMessage(w.msg, &w.parser, body)
		return outcome{kind: KindBadBody}
	}
	if isError(v) {
		w.msg = appendValueMessage(w.msg, v, body)
		return outcome{kind: KindBadBody}
	}
	if isAbort(v) {
		w.msg = appendValueMessage(w.msg, v, body)
		return outcome{kind: KindAborted}
	}
	return outcome{tokens: w.r.wl.completionTokens(v), cache: w.r.wl.cacheUse(v)}
}

// readStream reads an event stream to its end. The stream is closed
// before returning: when it was read to the end the connection goes back to
// the pool, otherwise it is dropped.
func (w *worker) readStream() outcome {
	body := w.resp.BodyStream()
	if body == nil {
		w.msg = append(w.msg, "the answer has no body"...)
		return outcome{kind: KindStreamError}
	}
	defer func() { _ = w.resp.CloseBodyStream() }()
	w.sse.reset(body)
	o := w.readEvents()
	if o.kind == "" {
		o.kind = w.drain()
	}
	return o
}

// readEvents reads events up to "data: [DONE]", timing token events and
// the lag of stamped ones. A stream that fails still returns the events it
// delivered before, for events/s.
//
// An event may carry several tokens (SGLang streams what a decode step, or
// speculative decoding, produced at once). Where the event says how many
// tokens there are so far (meta_info.completion_tokens on /generate, usage
// on OpenAI chunks that carry it), the gap since the previous token event
// is divided among its new tokens, one inter-token sample each, as
// bench_serving's async_request_sglang_generate does ("adjust_itl"); an
// event that says nothing counts one token. An event whose count did not
// grow is skipped, its gap carried on to the next, as there too.
func (w *worker) readEvents() outcome {
	var o outcome
	tt := tokenTimer{usage: -1}
	for {
		v, at, kind := w.nextEvent()
		if kind != "" {
			o.kind = kind
			break
		}
		if v == nil {
			o.tokens = tt.tokens()
			break
		}
		o.events++
		if w.r.inWindow(at) {
			o.inWindow++
		}
		if sent := w.r.wl.sentAt(v); sent > 0 {
			w.lags = append(w.lags, at.Sub(time.Unix(0, sent)))
		}
		hasText, n := w.r.wl.chunk(v)
		w.gaps = tt.add(w.gaps, at, hasText, n)
		// The last event that says is the answer's word on it.
		if c := w.r.wl.cacheUse(v); c.reported {
			o.cache = c
		}
	}
	o.first = tt.first
	return o
}

// nextEvent returns the stream's next event that carries JSON, parsed, and
// when it arrived; a nil v at "data: [DONE]". A stream that broke, an event
// that does not parse, and one that reports a failure end the stream with
// the kind returned, w.msg saying why: the events before them still count.
// The parsed event is w.parser's, valid until its next parse.
func (w *worker) nextEvent() (v *fastjson.Value, at time.Time, kind string) {
	for {
		data, at, err := w.sse.next()
		if err != nil {
			w.msg = appendStreamError(w.msg, err)
			return nil, at, streamKind(err)
		}
		if string(data) == "[DONE]" {
			return nil, at, ""
		}
		if len(data) == 0 {
			// "data:" alone: WHATWG dispatches it with empty data, but
			// it carries no JSON and no token, so it is a keep-alive.
			continue
		}
		v, err := w.parser.ParseBytes(data)
		if err != nil {
			w.msg = append(w.msg, "event "...)
			w.msg = appendAnswerMessage(w.msg, &w.parser, data)
			return nil, at, KindBadBody
		}
		return v, at, w.eventFailure(v, data)
	}
}

// eventFailure returns the error kind of an event that ends its stream as
// a failure, an error object or an abort, with w.msg saying why; "" for
// any other. An error is checked first: an event could say both.
func (w *worker) eventFailure(v *fastjson.Value, data []byte) string {
	switch {
	case isError(v):
		w.msg = appendValueMessage(w.msg, v, data)
		return KindStreamError
	case isAbort(v):
		w.msg = appendValueMessage(w.msg, v, data)
		return KindAborted
	}
	return ""
}

// drain reads what follows "data: [DONE]" up to the end of the response,
// which is at once for a well-behaved server, so the connection can be
// reused. It returns an error kind if the response does not end.
func (w *worker) drain() string {
	for {
		_, _, err := w.sse.next()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			w.msg = append(w.msg, "after data: [DONE], "...)
			w.msg = appendErrorMessage(w.msg, err)
			return streamKind(err)
		}
	}
}

// isError reports whether a JSON answer or event is an error object, as
// SGLang and pdlb write one: `{"error": {...}}`.
func isError(v *fastjson.Value) bool {
	e := v.Get("error")
	return e != nil && e.Type() != fastjson.TypeNull
}

// isAbort reports whether an answer, an event, or an item of a batch was
// ended by an abort (KindAborted).
func isAbort(v *fastjson.Value) bool {
	// Type first: Array on an object builds an error (2 allocations an
	// event).
	if v.Type() == fastjson.TypeArray {
		items, _ := v.Array()
		for _, it := range items {
			if isAbort(it) {
				return true
			}
		}
		return false
	}
	if string(v.GetStringBytes("meta_info", "finish_reason", "type")) == "abort" {
		return true
	}
	for _, c := range v.GetArray("choices") {
		if string(c.GetStringBytes("finish_reason")) == "abort" {
			return true
		}
	}
	return false
}

// transportKind classifies an error from HostClient.Do.
func transportKind(err error) string {
	var de *dialError
	switch {
	case errors.As(err, &de):
		return KindConnect
	case isTimeout(err):
		return KindTimeout
	default:
		return KindTransport
	}
}

// streamKind classifies an error that ended a stream before its end.
func streamKind(err error) string {
	if isTimeout(err) {
		return KindTimeout
	}
	return KindStreamError
}

// isTimeout reports whether err is a deadline expiring: fasthttp's own, or
// the connection's read deadline that stays armed while a stream is read.
func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
