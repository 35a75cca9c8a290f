package lb

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/health"
	"pdlb/lb/wire"
)

// reason says why pdlb answered with an error; it labels
// pdlb_request_errors_total, so the set is closed.
type reason int

const (
	reasonInvalidRequest reason = iota
	reasonBodyTooLarge
	reasonNotFound
	reasonMethodNotAllowed
	reasonNoBackend
	reasonBackendUnreachable
	reasonBackendTimeout
	reasonBackendFailed
	reasonStreamBroken
	reasonClientGone
	reasonClientTimeout
	reasonNotWarm
	reasonRefusedNoRoom
	reasonOverloaded
	reasonUnauthorized
	reasonForbidden
	reasonInternal
	reasonShutdown
	reasonBodyMemory
	reasonOutOfResources
	reasonTooManyConnections
	reasonWorkerRemoved
	numReasons
)

var reasonNames = [numReasons]string{
	reasonInvalidRequest:     "invalid_request",
	reasonBodyTooLarge:       "body_too_large",
	reasonNotFound:           "not_found",
	reasonMethodNotAllowed:   "method_not_allowed",
	reasonNoBackend:          "no_backend",
	reasonBackendUnreachable: "backend_unreachable",
	reasonBackendTimeout:     "backend_timeout",
	reasonBackendFailed:      "backend_failed",
	reasonStreamBroken:       "stream_broken",
	reasonClientGone:         "client_gone",
	reasonClientTimeout:      "client_timeout",
	reasonNotWarm:            "pair_not_warm",
	reasonRefusedNoRoom:      "decode_refused_no_room",
	reasonOverloaded:         "overloaded",
	reasonUnauthorized:       "unauthorized",
	reasonForbidden:          "forbidden",
	reasonInternal:           "internal",
	reasonShutdown:           "shutdown",
	reasonBodyMemory:         "body_memory",
	reasonOutOfResources:     "out_of_resources",
	reasonTooManyConnections: "too_many_connections",
	reasonWorkerRemoved:      "worker_removed",
}

func (r reason) String() string { return reasonNames[r] }

// errorType is the OpenAI-style "type" for an HTTP status.
func errorType(status int) string {
	switch status {
	case fasthttp.StatusTooManyRequests:
		return "rate_limit_error"
	case fasthttp.StatusUnauthorized:
		return "authentication_error"
	case fasthttp.StatusBadGateway:
		return "bad_gateway"
	case fasthttp.StatusServiceUnavailable:
		return "service_unavailable"
	case fasthttp.StatusGatewayTimeout:
		return "gateway_timeout"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "internal_error"
}

// errorBody is the OpenAI-shaped JSON error every route answers with.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// appendErrorJSON appends {"error": {...}} for status and msg to dst.
func appendErrorJSON(dst []byte, status int, msg string) []byte {
	b, err := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: errorType(status), Code: status}})
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot marshal an error body: %s", err))
	}
	return append(dst, b...)
}

// writeError answers the client with status and an OpenAI-shaped JSON error,
// and counts it by reason. It is the one way pdlb reports its own errors
// before a response has started.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, status int, r reason, msg string) {
	s.errorsByReason[r].Inc()
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if status == fasthttp.StatusServiceUnavailable || status == fasthttp.StatusTooManyRequests {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	ctx.Response.SetBodyRaw(appendErrorJSON(nil, status, msg))
}

// answerError is an answer pdlb gives instead of forwarding a request.
type answerError struct {
	status int
	reason reason
	msg    string
}

// answerError answers q with pdlb's own error.
func (s *Server) answerError(q *clientRequest, e *answerError) {
	if e.status == statusClientGone {
		s.errorsByReason[e.reason].Inc()
		dropClient(q.ctx)
	} else {
		s.writeError(q.ctx, e.status, e.reason, e.msg)
	}
	took := s.cfg.Now().Sub(q.start)
	q.rt.observe(e.status, took)
	s.accessLine(q.id, q.rt.path, e.status, took).Bool("stream", q.info.Stream).Str("error", e.msg).Msg("request")
	if q.permit {
		s.releasePermit()
	}
}

// appendSSEError appends the event that ends a stream pdlb can no longer
// complete: an error object (the shape SGLang itself streams) and [DONE].
func appendSSEError(dst []byte, status int, msg string) []byte {
	dst = append(dst, "data: "...)
	dst = appendErrorJSON(dst, status, msg)
	return append(dst, "\n\ndata: [DONE]\n\n"...)
}

// errPeerFailed cancels a call whose partner leg has failed.
type errPeerFailed struct {
	role string
	addr string
}

func (e *errPeerFailed) Error() string {
	return "cancelled because the " + e.role + " leg on " + e.addr + " failed"
}

// errGaveUp ends a prefill call still silent well after its decode ended.
var errGaveUp = errors.New("gave up on a prefill still silent after its decode finished")

// statusClientGone accounts a request whose client went away before its
// answer (nginx's 499).
const statusClientGone = 499

// dropClient closes the connection of a request whose client went away,
// with no answer written. A client that only shut its writing side (as
// nc -N does) may still be reading, and must not take an empty 200 for a
// generation that was cancelled; nginx closes it too.
func dropClient(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// errClientGone cancels the calls of a client that went away.
var errClientGone = errors.New("client closed the connection")

// errKeyRefused is a call whose worker refused pdlb's --api-key with a 401.
var errKeyRefused = errors.New("refused pdlb's --api-key (401): the worker needs another key")

// errMarkedDown is a control call not made: health checks find the worker
// down, and a hung one would hold the route for controlTimeout.
var errMarkedDown = errors.New("is down by its health checks: not asked")

// cutError is a call pdlb cut itself, closing its connection under it:
// at shutdown (errShutdown), or when a removed worker's drain timeout
// passed (drainCut). The worker sees the connection closed and aborts the
// request itself; the client is answered with the cut's reason and
// message, never the read error the close caused, and the call is not
// tried again.
type cutError struct {
	reason reason
	msg    string
}

func (e *cutError) Error() string { return e.msg }

// isCut reports whether err is a cut of pdlb's (cutError).
func isCut(err error) bool {
	var cut *cutError
	return errors.As(err, &cut)
}

// errShutdown cancels the calls still running when the shutdown grace
// period ends (Server.Shutdown): the failure paths then answer the client
// with it, a 503 or a stream's error event, instead of leaving the process
// exit to cut the connection without a word.
var errShutdown = &cutError{reasonShutdown, "pdlb is shutting down and its grace period is over; retry on another instance"}

// drainCut is the cut of the calls still running on removed worker b when
// its drain timeout passed (Server.drain).
func drainCut(b *Backend, timeout time.Duration) *cutError {
	return &cutError{reasonWorkerRemoved, "the " + b.role + " worker " + b.addr + " was removed, and its drain timeout (" +
		timeout.String() + ") passed with this request still running; retry"}
}

// pdlbShortage reports whether a call failed for want of pdlb's own
// resources (descriptors, body memory): no failure of its worker's, and
// one another worker would meet too.
func pdlbShortage(err error) bool {
	return health.OutOfResources(err) || errors.Is(err, errNoBodyMemory)
}

// classify maps a call error to the status, reason and message the client
// sees. role and addr name the backend.
func classify(err error, role, addr string) (int, reason, string) {
	var cut *cutError
	switch {
	case errors.Is(err, errKeyRefused):
		return fasthttp.StatusBadGateway, reasonBackendFailed, role + " backend " + addr + " " + err.Error()
	case errors.As(err, &cut):
		return fasthttp.StatusServiceUnavailable, cut.reason, cut.msg
	case errors.Is(err, errMarkedDown):
		return fasthttp.StatusServiceUnavailable, reasonNoBackend, role + " backend " + addr + " " + err.Error()
	case errors.Is(err, errNoBodyMemory):
		return fasthttp.StatusServiceUnavailable, reasonBodyMemory,
			"pdlb's memory for bodies (--max-body-memory) is in use by other requests, and the answer of " + role +
				" backend " + addr + " did not fit; retry later"
	case health.OutOfResources(err):
		// pdlb's own shortage (a flood of client connections, say): a
		// 502 would blame the worker, which was never asked.
		return fasthttp.StatusServiceUnavailable, reasonOutOfResources,
			"pdlb is out of resources (" + errnoText(err) + ") and could not call " + role + " backend " + addr +
				", which is not at fault; retry shortly"
	case wire.IsTimeout(err):
		return fasthttp.StatusGatewayTimeout, reasonBackendTimeout,
			"timed out waiting for " + role + " backend " + addr
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fasthttp.StatusBadGateway, reasonBackendFailed,
			role + " backend " + addr + " answered with a body larger than the limit"
	case wire.IsUnreachable(err):
		return fasthttp.StatusBadGateway, reasonBackendUnreachable,
			"cannot reach " + role + " backend " + addr + ": " + err.Error()
	case wire.IsConnDrop(err) || errors.Is(err, io.ErrUnexpectedEOF):
		// fasthttp's own message for this is advice to server authors.
		return fasthttp.StatusBadGateway, reasonBackendFailed,
			role + " backend " + addr + " closed the connection before answering"
	}
	return fasthttp.StatusBadGateway, reasonBackendFailed,
		role + " backend " + addr + " failed: " + err.Error()
}

// errnoText is the system's words for the errno err wraps ("too many open
// files"), or err's own text without one.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
