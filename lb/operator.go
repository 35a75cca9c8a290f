package lb

import (
	"crypto/subtle"
	"net"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// Operator routes act on every client's requests, or show the workers'
// internals: one client must not flush every worker's cache or abort every
// request (issue 19). They need Config.AdminAPIKey when one is set, on
// every listener; without one they answer only on the admin listeners
// (ServeAdmin) and to loopback clients, unless Config.OpenOperatorRoutes
// keeps mini_lb's open behaviour.

// operatorRule says which of a route's requests are for operators; a route
// without one is for clients.
type operatorRule func(ctx *fasthttp.RequestCtx) bool

// operatorRuleOf is the rule of the route at path, nil for a client route.
// A new operator route (such as a worker API) is one line here.
func operatorRuleOf(path string) operatorRule {
	switch path {
	case "/flush_cache", "/bootstrap", workersPath, workerPath:
		return everyRequest
	case "/abort_request":
		// A client may abort its own request, by its rid.
		return namesNoSingleRequest
	}
	return nil
}

// operatorRequests names the requests of the route at path that are for
// operators, for the clients told so.
func operatorRequests(path string) string {
	if path == "/abort_request" {
		return "an /abort_request that names no single request by its rid (abort_all)"
	}
	return path
}

func everyRequest(*fasthttp.RequestCtx) bool { return true }

func namesNoSingleRequest(ctx *fasthttp.RequestCtx) bool {
	_, _, one := singleAbort(ctx.PostBody())
	return !one
}

// singleAbort returns the rid an /abort_request body names, and what pdlb
// sends the workers for it: {"rid": <its rid>}, rebuilt, so that nothing
// else of the client's body reaches them: an abort_all that a reader
// other than Python's could miss ("yes", which pydantic takes for true).
// The body is read as the workers read it (bootstrap.Member: decoded keys,
// the last of duplicates). ok is false for any other body: no rid that is
// a non-empty string, or an abort_all other than false or null. Whether
// the rid names one request only is abortsOne's to tell.
func singleAbort(body []byte) (rid string, forward []byte, ok bool) {
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return "", nil, false
	}
	r := gjson.ParseBytes(bootstrap.Member(body, "rid"))
	if r.Type != gjson.String || r.Str == "" {
		return "", nil, false
	}
	if all := gjson.ParseBytes(bootstrap.Member(body, "abort_all")); all.Exists() && all.Type != gjson.False && all.Type != gjson.Null {
		return "", nil, false
	}
	forward = append([]byte(`{"rid":`), r.Raw...)
	return r.Str, append(forward, '}'), true
}

// abortNamesOthers explains the refusal of an abort of rid, which would
// abort other requests than the client's (abortsOne).
func abortNamesOthers(rid string) string {
	return "cannot abort rid " + strconv.Quote(rid) + ": SGLang aborts every request whose rid starts with the one named, " +
		"so an abort by rid needs one of " + strconv.Itoa(minAbortRID) + " characters at least, that no other request's rid starts with"
}

// permit reports whether the request may be served, having answered it
// with a 401 or 403 when not. adminListener is true on the listeners of
// ServeAdmin, which stand for an operator when no admin key is set.
func (s *Server) permit(ctx *fasthttp.RequestCtx, rt *route, requestID []byte, start time.Time, adminListener bool) bool {
	operator := rt.forOperators != nil && rt.forOperators(ctx)
	if !operator && (!rt.keyed || s.clientAuthorization == nil) {
		return true // most requests: looking for the header costs a scan of them all
	}
	auth := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if operator {
		what := operatorRequests(rt.path)
		switch {
		case s.adminAuthorization != nil:
			// Wherever the request comes from: a configured key is the
			// operator's choice, and loopback may be a proxy's.
			if keyMatches(auth, s.adminAuthorization) {
				return true
			}
			s.unauthorized(ctx, rt, requestID, start, what+" is for operators: send the header 'Authorization: Bearer <key>' with pdlb's --admin-api-key")
			return false
		case !(s.cfg.OpenOperatorRoutes && !isWorkerRoute(rt.path)) && !adminListener && !fromLoopback(ctx):
			// --mini-lb opens mini_lb's routes, never the worker API,
			// which moves traffic (issue 23 §2).
			s.refuse(ctx, rt, rt.path, requestID, start, fasthttp.StatusForbidden, reasonForbidden, forOperatorsOnly(ctx, what))
			return false
		}
		// No admin key: the route's own rule, --api-key's, as mini_lb.
	}
	if rt.keyed && s.clientAuthorization != nil && !keyMatches(auth, s.clientAuthorization) &&
		!keyMatches(auth, s.adminAuthorization) { // the operator's key opens the clients' routes too
		s.unauthorized(ctx, rt, requestID, start, "missing or wrong API key: send the header 'Authorization: Bearer <key>' with pdlb's --api-key")
		return false
	}
	return true
}

// keyMatches reports whether the Authorization header auth is want, in
// constant time; never when want is nil (no key is set).
func keyMatches(auth, want []byte) bool {
	return len(want) > 0 && subtle.ConstantTimeCompare(auth, want) == 1
}

// fromLoopback reports whether the client connected from a loopback
// address and was not forwarded by a proxy, which would make every client
// look local. A connection without an IP address (in memory) is not.
func fromLoopback(ctx *fasthttp.RequestCtx) bool {
	return onLoopback(ctx) && forwardingHeader(&ctx.Request.Header) == ""
}

// onLoopback reports whether the client's connection comes from a loopback
// address, whoever it was made for.
func onLoopback(ctx *fasthttp.RequestCtx) bool {
	addr, ok := ctx.RemoteAddr().(*net.TCPAddr)
	return ok && addr.IP.IsLoopback()
}

// forwardingHeaders are the headers a proxy adds for the client it
// forwards.
var forwardingHeaders = [...]string{"Forwarded", fasthttp.HeaderXForwardedFor, "X-Real-Ip"}

// forwardingHeader returns the name of the first forwarding header h
// carries, "" if none.
func forwardingHeader(h *fasthttp.RequestHeader) string {
	for _, name := range forwardingHeaders {
		if len(h.Peek(name)) > 0 {
			return name
		}
	}
	return ""
}

// forOperatorsOnly is the message of the 403 that refuses a caller what
// (an operator route, or the part of one asked for): how to enable it and,
// to a caller on loopback, why loopback did not count. Both admin
// listeners, --prometheus-port's and --pprof-addr's (ServeAdmin), serve
// the operator routes.
func forOperatorsOnly(ctx *fasthttp.RequestCtx, what string) string {
	const listeners = "on the --prometheus-port or --pprof-addr listener"
	if onLoopback(ctx) {
		return what + " is for operators: this request came from loopback with a proxy's forwarding header (" +
			forwardingHeader(&ctx.Request.Header) + "), so pdlb does not trust it as loopback; set pdlb's --admin-api-key and send it, " +
			"or call " + listeners + ", or from loopback without a proxy"
	}
	return what + " is for operators: set pdlb's --admin-api-key and send it, or call from loopback or " + listeners
}
