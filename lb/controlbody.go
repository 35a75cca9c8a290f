package lb

import (
	"bytes"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// A control route that reads its body (/abort_request) takes a JSON
// object, as SGLang's pydantic models do. A body that is none ('{', a
// form's rid=..., nothing at all) is the client's mistake, and gets the
// generate routes' 400 at once: it cannot say whether the caller names one
// request or all of them, so it decides no operator check (a 403 that
// blamed the caller for an abort_all it never sent), and the workers are
// not asked to make sense of it (a loopback caller got their 400s back as
// "2 of 2 backends refused /abort_request").

// refuseBadControlBody answers a request to rt whose body is not a JSON
// object with a 400 and reports true; false leaves the request to be
// served. A request with another method than rt's is left for the 405.
func (s *Server) refuseBadControlBody(ctx *fasthttp.RequestCtx, rt *route, requestID []byte, start time.Time) bool {
	if !rt.readsBody || string(ctx.Method()) != rt.method {
		return false
	}
	// A leading byte-order mark is taken, as by the generate routes and
	// Python's json.loads, and dropped here, so that the route's rules, its
	// handler and the workers read the same object (a rid behind a mark
	// was read as no rid: an abort_all). A copy, as the body may be
	// fasthttp's buffer, which SetBodyRaw gives back; such bodies are rare.
	body := ctx.PostBody()
	object := bytes.TrimPrefix(body, utf8BOM)
	if err := bootstrap.CheckObject(object); err != nil {
		s.refuse(ctx, rt, rt.path, requestID, start, fasthttp.StatusBadRequest, reasonInvalidRequest, badBodyMessage(ctx, err))
		return true
	}
	if len(object) < len(body) {
		ctx.Request.SetBodyRaw(bytes.Clone(object))
	}
	return false
}
