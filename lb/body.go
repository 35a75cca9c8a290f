package lb

import (
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/lb/wire"
)

// A request body is read by pdlb itself, as its bytes arrive
// (fasthttp.Server.StreamRequestBody), never as its Content-Length
// declares: fasthttp would allocate the declared length before the first
// byte of the body, and a few connections declaring 256 MiB each took the
// process down. The buffer doubles as bytes come, up to the declared length,
// so chunked and fixed-length bodies cost the same, linear in their size.
// Each growth is taken from the server's body memory (Config.MaxBodyMemory)
// first, and so are the copies rewritten for the workers: a request that
// would cross it gets a 503 at once, and pdlb never runs out of memory for
// what clients send.

// readBody reads ctx's body, at most limit bytes, into b; limitBy says
// what sets the limit, for the 413 of a body over it. The error, if any,
// is what the client is told; the connection is closed after it, as the
// rest of the body is still on the wire.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, b *bodyBuffer, limit int, limitBy string) *answerError {
	declared := declaredLength(ctx) // -1: chunked
	if declared > limit {
		return s.bodyTooLarge(ctx, limit, limitBy)
	}
	stream := ctx.RequestBodyStream()
	switch {
	case declared == 0:
		return nil
	case stream == nil: // read by fasthttp: a server without streaming
		b.buf = ctx.Request.Body()
		return nil
	case declared < 0 || declared > prefetched:
		// The rest comes from the socket: until it has, the connection is
		// still sending its request (connlimit.go).
		wire.Reading(ctx.Conn())
		defer wire.Serving(ctx.Conn())
	}
	var framed *wire.ClientConn
	if cc, ok := ctx.Conn().(*wire.ClientConn); ok && declared < 0 {
		framed = cc
	}
	switch err := b.fill(stream, declared, limit, s.memory, framed); {
	case err == nil:
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return s.bodyTooLarge(ctx, limit, limitBy)
	case errors.Is(err, errNoBodyMemory):
		return s.noBodyMemory(ctx)
	default:
		ctx.SetConnectionClose()
		return s.bodyReadFailed(ctx, err)
	}
	if declared < 0 {
		dropTrailers(&ctx.Request.Header)
	}
	return nil
}

// prefetched is how much of a body fasthttp reads before the handler runs
// (its readBodyWithStreaming).
const prefetched = 8 << 10

// closeUnread closes the connection after the answer when the request's
// body, which pdlb did not read, is still on the wire: fasthttp would read
// and drop up to 256 KiB of it at the client's pace, for as long as
// --client-read-timeout-secs, the connection counted as served meanwhile
// and so never closed to make room (connlimit.go). A body of up to
// prefetched bytes is read before the handler runs.
func closeUnread(ctx *fasthttp.RequestCtx) {
	if declared := declaredLength(ctx); declared < 0 || declared > prefetched {
		ctx.SetConnectionClose()
	}
}

// declaredLength is the length of ctx's body as its header declares it:
// -1 for a chunked body, 0 for none.
func declaredLength(ctx *fasthttp.RequestCtx) int {
	switch n := ctx.Request.Header.ContentLength(); {
	case n == -1:
		return -1
	case n < 0: // -2, fasthttp's "identity": a request without a body
		return 0
	default:
		return n
	}
}

// maxControlBody bounds the body of a control route: SGLang's are a few
// fields.
const maxControlBody = 64 << 10

// readControlBody reads the body of a control route rt into b, at most
// maxControlBody bytes, and makes it the request's body, which its rules
// and handler read; b must outlive the handler. It reports whether it
// could, having answered the request when not.
func (s *Server) readControlBody(ctx *fasthttp.RequestCtx, rt *route, b *bodyBuffer, requestID []byte, start time.Time) bool {
	aerr := s.readBody(ctx, b, maxControlBody, "on this route")
	switch {
	case aerr == nil:
		if b.held > 0 { // read by pdlb, not fasthttp, whose buffer it would free
			ctx.Request.SetBodyRaw(b.buf)
		}
		return true
	case aerr.status == statusClientGone:
		s.errorsByReason[aerr.reason].Inc()
		dropClient(ctx)
		rt.observe(aerr.status, s.cfg.Now().Sub(start))
	default:
		s.refuse(ctx, rt, rt.path, requestID, start, aerr.status, aerr.reason, aerr.msg)
	}
	return false
}

// bodyTooLarge refuses a body over limit, declared or read so far; limitBy
// says what sets the limit ("(--max-payload-size)", "on this route").
func (s *Server) bodyTooLarge(ctx *fasthttp.RequestCtx, limit int, limitBy string) *answerError {
	ctx.SetConnectionClose()
	return &answerError{fasthttp.StatusRequestEntityTooLarge, reasonBodyTooLarge,
		"request body is larger than the " + strconv.Itoa(limit) + " bytes allowed " + limitBy}
}

// noBodyMemory refuses a body for which the budget has no room now.
func (s *Server) noBodyMemory(ctx *fasthttp.RequestCtx) *answerError {
	ctx.SetConnectionClose()
	return s.memory.exhausted()
}

// bodyReadFailed says why a body could not be read: the client was too
// slow, left, or sent a malformed chunked body.
func (s *Server) bodyReadFailed(ctx *fasthttp.RequestCtx, err error) *answerError {
	var timeout interface{ Timeout() bool }
	switch {
	case wire.Evicted(ctx.Conn()):
		return &answerError{statusClientGone, reasonTooManyConnections, evictedMessage}
	case errors.Is(err, wire.ErrFramingTooLarge):
		return &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest, wire.ErrFramingTooLarge.Error()}
	case errors.As(err, &timeout) && timeout.Timeout():
		return &answerError{fasthttp.StatusRequestTimeout, reasonClientTimeout,
			"request not received within " + s.cfg.ClientReadTimeout.String() + " (--client-read-timeout-secs)"}
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF):
		return &answerError{statusClientGone, reasonClientGone, "the client closed its connection before sending the whole request"}
	}
	return &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest, "cannot read request body: " + readErrorMessage(err)}
}

// dropTrailers deletes the fields a chunked body's trailer added to h:
// they were not part of the request's header when pdlb checked it, and a
// worker must not take them for header fields. A name sent in both keeps
// neither: the trailer may not override what was checked.
func dropTrailers(h *fasthttp.RequestHeader) {
	var names [][]byte
	for name := range h.Trailers() {
		names = append(names, append([]byte(nil), name...))
	}
	for _, name := range names {
		h.DelBytes(name)
	}
	h.Del(fasthttp.HeaderTrailer)
}

// maxEchoedContentType is the most of a client's Content-Type that an
// error quotes back.
const maxEchoedContentType = 100

// badBodyMessage is what a client whose body was refused with err is told.
// A body that is not a JSON object is most often a form (curl -d 'text=hi')
// or plain text: its error names the Content-Type it came with, so the
// client sees what it sent, not where a JSON reader stopped (issue 20).
func badBodyMessage(ctx *fasthttp.RequestCtx, err error) string {
	if !errors.Is(err, bootstrap.ErrNotObject) {
		return err.Error()
	}
	ct := ctx.Request.Header.ContentType()
	if len(ct) == 0 {
		return err.Error() + " (sent without a Content-Type)"
	}
	more := ""
	if len(ct) > maxEchoedContentType {
		ct, more = ct[:maxEchoedContentType], "..."
	}
	return err.Error() + " (sent as Content-Type " + strconv.Quote(string(ct)) + more + ")"
}
