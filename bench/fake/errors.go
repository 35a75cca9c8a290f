package fake

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error shapes, as SGLang's FastAPI server (entrypoints/http_server.py and
// the OpenAI serving code) writes them:
//   - /generate validation errors: {"error": {"message": ...}}
//   - OpenAI routes' validation errors: an ErrorResponse of type
//     "BadRequestError";
//   - scheduler aborts with status 500 (failed KV transfers), on every
//     route: the HTTPException handler's ErrorResponse, whose type is the
//     status code as a string.

const (
	contentJSON = "application/json"
	contentSSE  = "text/event-stream; charset=utf-8"
	contentText = "text/plain; charset=utf-8"
)

// noRoomMessage is SGLang's refusal of a PD request without a room.
func noRoomMessage(rid string) string {
	return "Invalid request: Disaggregated request received without bootstrap room id. req.rid=" + pyRepr(rid)
}

// appendGenerateError appends {"error":{"message":msg}}.
func appendGenerateError(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, msg)
	return append(dst, "}}"...)
}

// appendOpenAIError appends an OpenAI-style ErrorResponse.
func appendOpenAIError(dst []byte, status int, typ, msg string) []byte {
	dst = append(dst, `{"object":"error","message":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, '}')
}

// appendStreamError appends the SSE event of an error inside an OpenAI
// stream: data: {"error": <ErrorResponse>}.
func appendStreamError(dst []byte, status int, typ, msg string) []byte {
	dst = append(dst, `data: {"error":`...)
	dst = appendOpenAIError(dst, status, typ, msg)
	return append(dst, "}\n\n"...)
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentJSON)
	ctx.SetBody(body)
}

func writeText(ctx *fasthttp.RequestCtx, status int, text string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentText)
	ctx.SetBodyString(text)
}

func methodNotAllowed(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
}

// writeBadRequest answers 400 in the route's validation error shape.
func writeBadRequest(ctx *fasthttp.RequestCtx, rt route, msg string) {
	if rt == routeGenerate {
		writeJSON(ctx, fasthttp.StatusBadRequest, appendGenerateError(nil, msg))
		return
	}
	writeJSON(ctx, fasthttp.StatusBadRequest, appendOpenAIError(nil, fasthttp.StatusBadRequest, "BadRequestError", msg))
}

// writeServerError answers the 500 of a scheduler abort.
func writeServerError(ctx *fasthttp.RequestCtx, msg string) {
	writeJSON(ctx, fasthttp.StatusInternalServerError, appendOpenAIError(nil, fasthttp.StatusInternalServerError, "500", msg))
}

// rejectNoRoom answers a PD request that has an item without a room, the way
// each route does (Error shapes, above). An OpenAI stream gets the refusal as
// an SSE error event, as SGLang's streaming error path writes it.
func (s *Server) rejectNoRoom(ctx *fasthttp.RequestCtx, r *request, it *item) {
	msg := noRoomMessage(it.rid)
	switch {
	case !r.stream:
		writeBadRequest(ctx, r.route, msg)
		return
	case r.route == routeGenerate:
		fin := finish{kind: finishAbort, msg: msg, status: fasthttp.StatusBadRequest}
		b := append([]byte("data: "), s.appendGenerateItem(nil, r, it, 0, fin)...)
		ctx.SetBody(append(b, "\n\ndata: [DONE]\n\n"...))
	default:
		b := appendStreamError(nil, fasthttp.StatusBadRequest, "BadRequestError", msg)
		ctx.SetBody(append(b, "data: [DONE]\n\n"...))
	}
	ctx.SetContentType(contentSSE)
}

// rejectBadRank answers a request with a routed_dp_rank out of range.
// SGLang raises the refusal as a ValueError in its tokenizer manager, which
// each route reports its own way: 400 in the route's shape, or, once a
// stream has begun, a {"error": {"message"}} event on /generate and an SSE
// error event on OpenAI routes, then [DONE].
func (s *Server) rejectBadRank(ctx *fasthttp.RequestCtx, r *request, msg string) {
	var b []byte
	switch {
	case !r.stream:
		writeBadRequest(ctx, r.route, msg)
		return
	case r.route == routeGenerate:
		b = append([]byte("data: "), appendGenerateError(nil, msg)...)
		b = append(b, "\n\n"...)
	default:
		b = appendStreamError(nil, fasthttp.StatusBadRequest, "BadRequestError", msg)
	}
	ctx.SetBody(append(b, "data: [DONE]\n\n"...))
	ctx.SetContentType(contentSSE)
}
