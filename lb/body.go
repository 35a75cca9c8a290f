package lb

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
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

// Small body buffers are pooled by size, a power of two from minPooledBody
// to maxPooledBody: most bodies fit the smallest, and a stream's client
// body is held until its first event (the handler's return), so at a
// thousand streams starting at once a buffer larger than the body would
// show in pdlb's memory.
const (
	minPooledBody = 1 << 10
	maxPooledBody = 16 << 10
)

var bodyPools [5]sync.Pool // minPooledBody << i

// pooledBody takes a buffer of at least size bytes (at most maxPooledBody)
// from its pool, and returns it with its capacity.
func pooledBody(size int) (*[]byte, int) {
	i := 0
	for minPooledBody<<i < size {
		i++
	}
	if v := bodyPools[i].Get(); v != nil {
		return v.(*[]byte), minPooledBody << i
	}
	b := make([]byte, 0, minPooledBody<<i)
	return &b, minPooledBody << i
}

func putPooledBody(b *[]byte) {
	i := 0
	for minPooledBody<<i < cap(*b) {
		i++
	}
	bodyPools[i].Put(b)
}

// requestBody is a client's body, read into a buffer that grows with what
// arrived. It lives on the handler's stack; release gives everything back.
type requestBody struct {
	buf []byte
	// pooled is buf's pool entry while buf is a pooled one.
	pooled *[]byte
	// held is the budget held for buf: its capacity.
	held int
}

// readBody reads ctx's body, at most limit bytes, into b. The error, if any,
// is what the client is told; the connection is closed after it, as the
// rest of the body is still on the wire.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, b *requestBody, limit int) *answerError {
	declared := declaredLength(ctx) // -1: chunked
	if declared > limit {
		return s.bodyTooLarge(ctx, limit)
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
		reading(ctx.Conn())
		defer serving(ctx.Conn())
	}
	cc, _ := ctx.Conn().(*clientConn)
	if declared < 0 && cc != nil {
		defer cc.unlimitWire()
	}
	for declared < 0 || len(b.buf) < declared {
		if len(b.buf) == cap(b.buf) {
			if aerr := s.growBody(ctx, b, declared, limit); aerr != nil {
				return aerr
			}
		}
		if declared < 0 && cc != nil {
			cc.limitWire(cap(b.buf) - len(b.buf))
		}
		n, err := stream.Read(b.buf[len(b.buf):cap(b.buf)])
		b.buf = b.buf[:len(b.buf)+n]
		if len(b.buf) > limit {
			return s.bodyTooLarge(ctx, limit)
		}
		if err == io.EOF && declared >= 0 && len(b.buf) < declared {
			err = io.ErrUnexpectedEOF // fasthttp's stream ends a cut body so
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			ctx.SetConnectionClose()
			return s.bodyReadFailed(ctx, err)
		}
	}
	if declared < 0 {
		dropTrailers(&ctx.Request.Header)
	}
	return nil
}

// growBody makes room for more of b: twice the buffer, never beyond the
// declared length nor past limit+1 (the byte that tells a chunked body is
// too large), from a pool while it is small.
func (s *Server) growBody(ctx *fasthttp.RequestCtx, b *requestBody, declared, limit int) *answerError {
	size := max(2*cap(b.buf), minPooledBody)
	if declared >= 0 {
		size = min(size, declared)
	} else {
		size = min(size, limit+1)
	}
	var pooled *[]byte
	if size <= maxPooledBody {
		pooled, size = pooledBody(size)
	}
	if !s.memory.take(size) {
		if pooled != nil {
			putPooledBody(pooled)
		}
		return s.noBodyMemory(ctx)
	}
	var grown []byte
	if pooled != nil {
		grown = (*pooled)[:0]
	} else {
		grown = make([]byte, 0, size)
	}
	grown = append(grown, b.buf...)
	b.releaseBuffer(s.memory)
	b.buf, b.pooled, b.held = grown, pooled, size
	return nil
}

// release gives b's memory back to the budget, and its chunk to the pool.
func (b *requestBody) release(m *bodyMemory) {
	b.releaseBuffer(m)
	b.buf = nil
}

func (b *requestBody) releaseBuffer(m *bodyMemory) {
	if b.pooled != nil {
		putPooledBody(b.pooled)
		b.pooled = nil
	}
	m.give(b.held)
	b.held = 0
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
func (s *Server) readControlBody(ctx *fasthttp.RequestCtx, rt *route, b *requestBody, requestID []byte, start time.Time) bool {
	aerr := s.readBody(ctx, b, maxControlBody)
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

// bodyTooLarge refuses a body over limit, declared or read so far.
func (s *Server) bodyTooLarge(ctx *fasthttp.RequestCtx, limit int) *answerError {
	ctx.SetConnectionClose()
	return &answerError{fasthttp.StatusRequestEntityTooLarge, reasonBodyTooLarge,
		"request body is larger than the " + strconv.Itoa(limit) + " bytes allowed (--max-payload-size)"}
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
	case evicted(ctx.Conn()):
		return &answerError{statusClientGone, reasonTooManyConnections, evictedMessage}
	case errors.Is(err, errFramingTooLarge):
		return &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest, errFramingTooLarge.Error()}
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
