package lb

import (
	"bytes"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/lb/wire"
)

// A request's route, who may call it, and its access line.

// buildRoutes makes the routes pdlb serves, each with its metrics.
func (s *Server) buildRoutes() {
	s.routes = make(map[string]*route)
	for _, p := range []string{"/generate", "/v1/completions", "/v1/chat/completions"} {
		s.routes[p] = newRoute(s.ms, p, fasthttp.MethodPost, true)
	}
	for _, p := range []string{"/flush_cache", "/abort_request"} {
		s.routes[p] = newRoute(s.ms, p, fasthttp.MethodPost, false)
	}
	for _, p := range []string{"/health", "/health_generate", "/server_info", "/get_server_info",
		"/model_info", "/get_model_info", "/v1/models", "/metrics", "/bootstrap", "/readiness", "/liveness"} {
		s.routes[p] = newRoute(s.ms, p, fasthttp.MethodGet, false)
	}
	for _, p := range []string{workersPath, workerPath} {
		s.routes[p] = newRoute(s.ms, p, workerMethods(p), false)
	}
	s.routes[workersPath].readsBody = true // a POST's worker spec
	s.notFound = newRoute(s.ms, "other", "", false)
	s.unread = newRoute(s.ms, "unread", "", false)
}

// handle routes a request. Unknown paths and wrong methods get JSON errors.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	s.serve(ctx, s.routeOf(ctx.Path()), false)
}

// routeOf is the route of path, nil for none: every /workers/{worker_id}
// is one route.
func (s *Server) routeOf(path []byte) *route {
	if rt := s.routes[string(path)]; rt != nil || !bytes.HasPrefix(path, []byte(workersPath+"/")) {
		return rt
	}
	return s.routes[workerPath]
}

// allows reports whether a request of method is rt's: one of the methods
// rt.method lists, or HEAD where GET is.
// It allocates nothing: every request asks.
func (rt *route) allows(method []byte, head bool) bool {
	for rest, more := rt.method, true; more; {
		var m string
		m, rest, more = strings.Cut(rest, ", ")
		if m == string(method) || (head && m == fasthttp.MethodGet) {
			return true
		}
	}
	return false
}

// serve answers a request for rt, nil for a path pdlb does not serve;
// adminListener is true on the listeners of ServeAdmin. Every route's
// duration runs from here, refusals' included.
func (s *Server) serve(ctx *fasthttp.RequestCtx, rt *route, adminListener bool) {
	start := s.cfg.Now()
	wire.Serving(ctx.Conn())
	requestID := s.setRequestID(ctx)
	if name := badHeaderName(&ctx.Request.Header); name != nil {
		s.refuseBadHeader(ctx, rt, name, requestID, start)
		return
	}
	if rt == nil {
		path := string(ctx.Path())
		s.refuse(ctx, s.notFound, path, requestID, start, fasthttp.StatusNotFound, reasonNotFound, "no route for "+path)
		return
	}
	if rt.readsBody {
		var body bodyBuffer
		defer body.release(s.memory)
		if !s.readControlBody(ctx, rt, &body, requestID, start) || s.refuseBadControlBody(ctx, rt, requestID, start) {
			return
		}
	}
	if !s.permit(ctx, rt, requestID, start, adminListener) {
		return
	}
	if !rt.allows(ctx.Method(), ctx.IsHead()) {
		s.methodNotAllowed(ctx, rt, requestID, start)
		return
	}
	if rt.generate {
		s.serveGenerate(ctx, rt, requestID, start)
	} else {
		if isWorkerRoute(rt.path) {
			s.serveWorkers(ctx, rt)
		} else {
			s.serveControl(ctx, rt)
		}
		if !rt.readsBody {
			closeUnread(ctx)
		}
		status, took := ctx.Response.StatusCode(), s.cfg.Now().Sub(start)
		rt.observe(status, took)
		line := s.accessLine(requestID, rt.path, status, took)
		if line != nil && status >= fasthttp.StatusBadRequest {
			// The error the control route answered, as the generate
			// routes' lines carry theirs.
			if msg := gjson.GetBytes(ctx.Response.Body(), "error.message"); msg.Exists() {
				line.Str("error", msg.String())
			}
		}
		line.Msg("request")
	}
	// An answer that fasthttp will write in two pieces goes out in one.
	if cc, ok := ctx.Conn().(*wire.ClientConn); ok && takesTwoWrites(&ctx.Response) {
		cc.HoldLargeAnswer()
	}
}

// takesTwoWrites reports whether fasthttp writes resp in two pieces, its
// full write buffer and then the rest: a body set whole that is at least
// that buffer, or a large non-stream answer (answerBody), which is more.
func takesTwoWrites(resp *fasthttp.Response) bool {
	if _, ok := resp.BodyStream().(*answerBody); ok {
		return true
	}
	return !resp.IsBodyStream() && len(resp.Body()) >= wire.ClientWriteBufferSize
}

// unauthorized refuses a client that did not present the key msg asks for.
func (s *Server) unauthorized(ctx *fasthttp.RequestCtx, rt *route, requestID []byte, start time.Time, msg string) {
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, "Bearer")
	s.refuse(ctx, rt, rt.path, requestID, start, fasthttp.StatusUnauthorized, reasonUnauthorized, msg)
}

func (s *Server) methodNotAllowed(ctx *fasthttp.RequestCtx, rt *route, requestID []byte, start time.Time) {
	ctx.Response.Header.Set(fasthttp.HeaderAllow, rt.method)
	msg := string(ctx.Method()) + " is not allowed on " + rt.path + "; use " + rt.method
	s.refuse(ctx, rt, rt.path, requestID, start, fasthttp.StatusMethodNotAllowed, reasonMethodNotAllowed, msg)
}

// refuse answers a request pdlb turns away before serving it, accounted
// under rt and logged under path (the client's, for route "other") with
// the time since start.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, rt *route, path string, requestID []byte, start time.Time, status int, r reason, msg string) {
	closeUnread(ctx)
	s.writeError(ctx, status, r, msg)
	took := s.cfg.Now().Sub(start)
	rt.observe(status, took)
	s.accessLine(requestID, path, status, took).Str("error", msg).Msg("request")
}

// accessLine starts the access-log line of a request that ended with
// status after took; nil without --access-log, and zerolog makes nothing
// of a nil line.
func (s *Server) accessLine(requestID []byte, route string, status int, took time.Duration) *zerolog.Event {
	return s.accessStart(requestID, route, status).Dur("took", took)
}

// accessStart is accessLine without the duration, for a request whose
// start is not known.
func (s *Server) accessStart(requestID []byte, route string, status int) *zerolog.Event {
	if !s.cfg.AccessLog {
		return nil
	}
	return s.access.Info().Bytes("request_id", requestID).Str("route", route).Int("status", status)
}
