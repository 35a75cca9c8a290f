package lb

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"pdlb/lb/wire"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// handleParseError answers requests fasthttp could not read, in pdlb's JSON
// error shape.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	status, r := fasthttp.StatusBadRequest, reasonInvalidRequest
	var msg string
	var small *fasthttp.ErrSmallBuffer
	var timeout interface{ Timeout() bool }
	switch {
	case wire.Evicted(ctx.Conn()):
		// pdlb closed it to make room: no answer can reach the client.
		status, r, msg = statusClientGone, reasonTooManyConnections, evictedMessage
	case errors.As(err, &small):
		status = fasthttp.StatusRequestHeaderFieldsTooLarge
		msg = fmt.Sprintf("request header is larger than the %d bytes allowed (--max-header-size)", s.cfg.MaxHeaderSize)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, r = fasthttp.StatusRequestEntityTooLarge, reasonBodyTooLarge
		msg = fmt.Sprintf("request body is larger than the %d bytes allowed (--max-payload-size)", s.cfg.MaxRequestBodySize)
	case errors.As(err, &timeout) && timeout.Timeout():
		// The client took longer than --client-read-timeout-secs to send it.
		status, r = fasthttp.StatusRequestTimeout, reasonClientTimeout
		msg = fmt.Sprintf("request not received within %s (--client-read-timeout-secs)", s.cfg.ClientReadTimeout)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		// The client left before sending all of it: nobody reads an answer.
		status, r = statusClientGone, reasonClientGone
		msg = "the client closed its connection before sending the whole request"
	default:
		msg = "cannot read request: " + readErrorMessage(err)
	}
	// A body fasthttp could not read takes the header with it (it resets
	// the request): such a request's route and request ID are gone, and it
	// is counted, and logged, under the route "unread".
	rt, path := s.unread, s.unread.path
	if ctx.Request.Header.Len() > 0 {
		path = string(ctx.Path())
		if rt = s.routes[path]; rt == nil {
			rt = s.notFound
		}
	}
	requestID := s.setRequestID(ctx)
	// When the read began is not known (fasthttp's ctx here is a fresh
	// one): no duration is recorded, nor logged. It is accounted before
	// the connection is closed, which a client may see at once.
	rt.count(status)
	s.accessStart(requestID, path, status).Str("error", msg).Msg("request")
	if status != statusClientGone {
		s.writeError(ctx, status, r, msg)
	} else {
		s.errorsByReason[r].Inc()
		// fasthttp writes the response regardless: a client that only
		// shut its writing side must not read a 200 out of it.
		_ = ctx.Conn().Close()
	}
}

// readErrorMessage is what a client is told of fasthttp's error reading its
// request: without the quoted values (redactQuoted) and the dump of the
// read buffer fasthttp appends, and naming a bad trailer as the request's,
// which fasthttp's message calls a response header.
func readErrorMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": buffer size="); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.Replace(msg, "error when reading response headers", "error when reading request trailers", 1)
	return redactQuoted(msg)
}

// redactingLogger is fasthttp's logger: a debug line, with what it quotes
// of a request redacted (redactQuoted).
type redactingLogger struct{ log *zerolog.Logger }

func (l redactingLogger) Printf(format string, args ...any) {
	if e := l.log.Debug(); e.Enabled() {
		e.Msg(redactQuoted(fmt.Sprintf(format, args...)))
	}
}

// redactQuoted replaces each quoted string of a fasthttp parse error with
// "…". fasthttp quotes what it could not parse, such as the start of the
// request or a header's value, and an Authorization header is no business
// of the client's error or pdlb's log.
func redactQuoted(msg string) string {
	var b strings.Builder
	for {
		start := strings.IndexByte(msg, '"')
		if start < 0 {
			return b.String() + msg
		}
		b.WriteString(msg[:start])
		b.WriteString(`"…"`)
		msg = msg[start+1:]
		end := 0
		for end < len(msg) && msg[end] != '"' {
			if msg[end] == '\\' {
				end++
			}
			end++
		}
		msg = msg[min(end+1, len(msg)):]
	}
}
