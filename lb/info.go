package lb

import (
	"encoding/json"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// controlTimeout bounds each backend call of the control routes. SGLang's
// own /health_generate gives up after 20 s, so this leaves it room.
const controlTimeout = 30 * time.Second

// serveControl answers the routes that are not generations: mini_lb's
// health, cache and info routes, and /metrics.
func (s *Server) serveControl(ctx *fasthttp.RequestCtx, rt *route) {
	switch rt.path {
	case "/health":
		// As mini_lb: pdlb itself is up; no backend is contacted.
		ctx.SetStatusCode(fasthttp.StatusOK)
	case "/health_generate":
		s.writeFanOut(ctx, s.healthGenerate.get(s.cfg.Now, s.checkGeneration))
	case "/flush_cache":
		s.serveFlushCache(ctx)
	case "/abort_request":
		// The newest mini_lb's: the client's body, to every worker (a rid
		// lives on one prefill and one decode; abort_all on all of them),
		// but pdlb's own of an abort by rid (singleAbort).
		body := ctx.PostBody()
		if rid, forward, ok := singleAbort(body); ok {
			if !s.abortsOne(rid) {
				s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest, abortNamesOthers(rid))
				return
			}
			body = forward
		}
		s.markAborted(body)
		s.serveFanOut(ctx, controlCall{method: fasthttp.MethodPost, uri: "/abort_request",
			body: body, timeout: controlTimeout, askDown: true}, fasthttp.StatusBadGateway, true)
	case "/server_info", "/get_server_info":
		s.serveServerInfo(ctx)
	case "/model_info", "/get_model_info":
		s.proxyFromPrefill(ctx, "/model_info")
	case "/v1/models":
		s.proxyFromPrefill(ctx, "/v1/models")
	case "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		s.ms.WritePrometheus(ctx)
		metrics.WriteProcessMetrics(ctx)
	case "/bootstrap":
		s.serveBootstrap(ctx)
	case "/readiness":
		s.serveReadiness(ctx)
	case "/liveness":
		// The process serves; nothing else is asked.
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	default:
		panic("BUG: no control handler for " + rt.path)
	}
}

// answer is one backend's reply to a control call.
type answer struct {
	backend *Backend
	status  int
	body    []byte
	err     error
}

func (a *answer) ok() bool { return a.err == nil && a.status == fasthttp.StatusOK }

// clientRefused reports whether the worker refused the client's
// credentials: a 401 or 403 to a call that carried the client's
// Authorization header, or none, rather than pdlb's key.
func (a *answer) clientRefused() bool {
	return a.err == nil && (a.status == fasthttp.StatusUnauthorized || a.status == fasthttp.StatusForbidden) &&
		a.backend.authorization == nil
}

// clientAuthorization is the client's Authorization header, nil if none.
func clientAuthorization(ctx *fasthttp.RequestCtx) []byte {
	return ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
}

// fanOut sends method uri to each backend at once and returns their answers
// in the same order.
func fanOut(backends []*Backend, cc controlCall) []answer {
	answers := make([]answer, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		if b.markedDown() && !cc.askDown {
			answers[i] = answer{backend: b, err: errMarkedDown}
			continue
		}
		wg.Go(func() { answers[i] = b.get(cc) })
	}
	wg.Wait()
	return answers
}

// controlCall is a call the control routes, and pdlb's own reads of a
// worker's state, make to workers.
type controlCall struct {
	method, uri string
	// body, when not nil, is sent as JSON.
	body    []byte
	timeout time.Duration
	// clientAuth is the Authorization header of the client the call is made
	// for, nil for pdlb's own calls.
	clientAuth []byte
	// askDown asks workers that health checks find down too, which fanOut
	// otherwise skips: an abort is cheap, and a worker down by its probes
	// may still hold the request.
	askDown bool
}

// backendStatus is one backend's line in a control route's report.
type backendStatus struct {
	Role   string `json:"role"`
	URL    string `json:"url"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// pools lists the server's pools: prefills, decodes, fallbacks.
func (s *Server) pools() [3]*Pool { return [3]*Pool{s.prefills, s.decodes, s.fallbacks} }

// allBackends lists every worker: prefills, then decodes, then fallbacks.
func (s *Server) allBackends() []*Backend {
	var all []*Backend
	for _, p := range s.pools() {
		all = append(all, p.backends()...)
	}
	return all
}

// serveFanOut sends the call to every worker, and answers with every
// backend's status: a 200 when all answer 200, as mini_lb (whose body is
// empty); otherwise failStatus, where mini_lb would hide the failure. With
// passRefusal, workers that all failed with the same 4xx answer (SGLang's
// /flush_cache answers 400 while requests run) have pdlb answer it too: the
// workers refused, and no gateway failed.
func (s *Server) serveFanOut(ctx *fasthttp.RequestCtx, cc controlCall, failStatus int, passRefusal bool) {
	cc.clientAuth = clientAuthorization(ctx)
	s.writeFanOut(ctx, s.fanOutReport(cc, failStatus, passRefusal))
}

// fanOutAnswer is what a fanned-out call answers the client: status, a 200
// when every worker answered 200, with body, the report of each worker;
// failed when it is counted as a failure of the workers.
type fanOutAnswer struct {
	status int
	body   []byte
	failed bool
}

// writeFanOut answers a with ctx. a may be shared: its body is copied.
func (s *Server) writeFanOut(ctx *fasthttp.RequestCtx, a fanOutAnswer) {
	ctx.SetStatusCode(a.status)
	if a.failed {
		s.errorsByReason[reasonBackendFailed].Inc()
	}
	if a.body != nil {
		ctx.SetContentType("application/json")
		ctx.SetBody(a.body)
	}
}

// fanOutReport makes the call on every worker, and tells what serveFanOut
// answers.
func (s *Server) fanOutReport(cc controlCall, failStatus int, passRefusal bool) fanOutAnswer {
	answers := fanOut(s.allBackends(), cc)
	report := make([]backendStatus, len(answers))
	failed := 0
	refusal := 0 // the 4xx every failed worker answered, if they agree
	for i := range answers {
		a := &answers[i]
		report[i] = backendStatus{Role: a.backend.role, URL: a.backend.url, Status: a.status}
		if a.err != nil {
			_, _, report[i].Error = classify(a.err, a.backend.role, a.backend.addr)
		}
		if a.ok() {
			continue
		}
		failed++
		switch {
		case a.err != nil || a.status < 400 || a.status >= 500 || (refusal != 0 && refusal != a.status) ||
			a.status == fasthttp.StatusUnauthorized && a.backend.authorization != nil: // pdlb's key, not the client's
			refusal = -1
		case refusal == 0:
			refusal = a.status
		}
	}
	if failed == 0 {
		return fanOutAnswer{status: fasthttp.StatusOK, body: fanOutBody(nil, report)}
	}
	// Workers that refused alike are passed on, not taken for failures.
	verb := "refused"
	if passRefusal && refusal > 0 {
		failStatus = refusal
	} else {
		verb = "failed"
		route, _, _ := strings.Cut(cc.uri, "?")
		s.log.Warn().Str("route", route).Int("failed", failed).Int("backends", len(answers)).
			Msg("backends failed a fanned-out call")
	}
	body := fanOutBody(&errorDetail{
		Message: strconv.Itoa(failed) + " of " + strconv.Itoa(len(answers)) + " backends " + verb + " " + cc.uri,
		Type:    errorType(failStatus),
		Code:    failStatus,
	}, report)
	return fanOutAnswer{status: failStatus, body: body, failed: verb == "failed"}
}

// fanOutBody is the body of a fanned-out call's answer: each worker's
// status, and the error when one failed. It lists them when all succeed
// too: an operator who flushed every cache sees which workers did it, where
// mini_lb's empty 200 told nothing (issue 20).
func fanOutBody(e *errorDetail, report []backendStatus) []byte {
	body, err := json.Marshal(struct {
		Error    *errorDetail    `json:"error,omitempty"`
		Backends []backendStatus `json:"backends"`
	}{Error: e, Backends: report})
	if err != nil {
		panic("BUG: cannot marshal a backend report: " + err.Error())
	}
	return body
}

// maxFlushTimeout is the longest ?timeout= that /flush_cache takes.
const maxFlushTimeout = time.Hour

// serveFlushCache fans out /flush_cache, forwarding ?timeout= as mini_lb
// does: the workers must get it to drain in-flight KV transfers first.
func (s *Server) serveFlushCache(ctx *fasthttp.RequestCtx) {
	uri := "/flush_cache"
	timeout := controlTimeout
	if t := ctx.QueryArgs().Peek("timeout"); len(t) > 0 {
		secs, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsNaN(secs) || secs < 0 || secs > maxFlushTimeout.Seconds() {
			// A bound, as pdlb waits that long on top of controlTimeout,
			// and a Duration holds no more than 292 years.
			s.writeError(ctx, fasthttp.StatusBadRequest, reasonInvalidRequest,
				"timeout must be a number of seconds from 0 to "+strconv.Itoa(int(maxFlushTimeout.Seconds()))+", got "+strconv.Quote(string(t)))
			return
		}
		uri += "?timeout=" + string(t)
		if secs > 0 {
			timeout += time.Duration(secs * float64(time.Second))
		}
	}
	s.serveFanOut(ctx, controlCall{method: fasthttp.MethodPost, uri: uri, timeout: timeout}, fasthttp.StatusBadGateway, true)
	// The workers asked have emptied their caches, or will; one that
	// failed to is only sent a few misses as if it had.
	for _, b := range s.allBackends() {
		b.forgetPrefixes()
	}
}

// serveServerInfo answers mini_lb's aggregated /server_info: every decode's
// internal_states concatenated, and each worker's own answer. A worker that
// cannot answer appears as {"url", "error"} in its list.
func (s *Server) serveServerInfo(ctx *fasthttp.RequestCtx) {
	answers := fanOut(s.allBackends(), controlCall{method: fasthttp.MethodGet, uri: "/server_info",
		timeout: controlTimeout, clientAuth: clientAuthorization(ctx)})
	// Split by each answer's own backend: the pools may have changed since
	// allBackends read them (a worker added or removed meanwhile).
	var prefills, decodes, fallbacks []answer
	for _, a := range answers {
		switch a.backend.role {
		case rolePrefill:
			prefills = append(prefills, a)
		case roleDecode:
			decodes = append(decodes, a)
		default:
			fallbacks = append(fallbacks, a)
		}
	}
	var states []byte
	for i := range decodes {
		if is := gjson.GetBytes(decodes[i].body, "internal_states"); decodes[i].ok() && is.IsArray() {
			if items := arrayItems([]byte(is.Raw)); len(items) > 0 {
				if len(states) > 0 {
					states = append(states, ',')
				}
				states = append(states, items...)
			}
		}
	}
	if len(states) == 0 {
		states = []byte(`{"last_gen_throughput":0.0,"avg_spec_accept_length":null}`)
	}
	out := append([]byte(`{"internal_states":[`), states...)
	out = append(out, `],"prefill":`...)
	out = appendInfoList(out, prefills)
	out = append(out, `,"decode":`...)
	out = appendInfoList(out, decodes)
	if len(fallbacks) > 0 {
		out = append(out, `,"fallback":`...)
		out = appendInfoList(out, fallbacks)
	}
	out = append(out, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(out)
}

func appendInfoList(dst []byte, answers []answer) []byte {
	dst = append(dst, '[')
	for i := range answers {
		if i > 0 {
			dst = append(dst, ',')
		}
		a := &answers[i]
		if a.ok() && gjson.ValidBytes(a.body) {
			dst = appendRedacted(dst, a.body)
			continue
		}
		msg := "answered " + strconv.Itoa(a.status)
		if a.err != nil {
			_, _, msg = classify(a.err, a.backend.role, a.backend.addr)
		}
		b, _ := json.Marshal(backendStatus{Role: a.backend.role, URL: a.backend.url, Status: a.status, Error: msg})
		dst = append(dst, b...)
	}
	return append(dst, ']')
}

// appendRedacted appends a worker's /server_info answer with its secrets
// hidden. SGLang's answer is its whole server_args, api_key and
// admin_api_key included, which pdlb, holding the key, would otherwise
// hand to any client of its open info routes. A secret that is set becomes
// "<redacted>"; one that is not (null) stays as it is.
func appendRedacted(dst, info []byte) []byte {
	root := gjson.ParseBytes(info)
	if !root.IsObject() {
		return append(dst, info...)
	}
	dst = append(dst, '{')
	first := true
	root.ForEach(func(k, v gjson.Result) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, k.Raw...)
		dst = append(dst, ':')
		if isSecret(k.Str) && v.Type != gjson.Null {
			dst = append(dst, `"<redacted>"`...)
		} else {
			dst = append(dst, v.Raw...)
		}
		return true
	})
	return append(dst, '}')
}

// isSecret reports whether a server_args field holds a secret: SGLang's
// api_key, admin_api_key and ssl_keyfile_password, and fields named like
// them.
func isSecret(key string) bool {
	return strings.HasSuffix(key, "api_key") || strings.HasSuffix(key, "password") || strings.HasSuffix(key, "secret")
}

// proxyFromPrefill answers with the first prefill's answer to GET uri, as
// mini_lb does, trying the next prefill when one fails, and skipping those
// that health checks find down.
func (s *Server) proxyFromPrefill(ctx *fasthttp.RequestCtx, uri string) {
	var last answer
	for _, b := range s.prefills.backends() {
		if b.markedDown() {
			if last.backend == nil { // said only if no prefill is asked
				last = answer{backend: b, err: errMarkedDown}
			}
			continue
		}
		if last = b.get(controlCall{method: fasthttp.MethodGet, uri: uri, timeout: controlTimeout, clientAuth: clientAuthorization(ctx)}); last.ok() {
			ctx.SetContentType("application/json")
			ctx.SetBody(last.body)
			return
		}
	}
	if last.clientRefused() {
		// The client's own key (or none) was refused: its answer, as a
		// worker's 4xx on the generate routes.
		ctx.SetStatusCode(last.status)
		ctx.SetContentType("application/json")
		ctx.SetBody(last.body)
		return
	}
	if last.backend == nil {
		s.writeError(ctx, fasthttp.StatusServiceUnavailable, reasonNoBackend,
			"no prefill worker to ask "+uri+": the prefill pool has no workers")
		return
	}
	msg := "no prefill backend answered " + uri + "; last: " + last.backend.url
	status, r := fasthttp.StatusBadGateway, reasonBackendFailed
	if last.err != nil {
		status, r, msg = classify(last.err, last.backend.role, last.backend.addr)
	} else {
		msg += " answered " + strconv.Itoa(last.status)
	}
	s.writeError(ctx, status, r, msg)
}

// bootstrapStatus is one prefill's entry in /bootstrap.
type bootstrapStatus struct {
	URL        string           `json:"url"`
	Bootstrap  string           `json:"bootstrap"`
	Ready      bool             `json:"ready"`
	Port       int              `json:"port"`
	PortSource string           `json:"port_source"`
	Info       *bootstrap.Info  `json:"info,omitempty"`
	Ranks      []bootstrap.Rank `json:"ranks,omitempty"`
	Error      string           `json:"error,omitempty"`
	Generation uint64           `json:"generation"`
	Updated    time.Time        `json:"updated"`
	Pairs      []pairStatus     `json:"pairs,omitempty"`
}

// serveBootstrap shows what the registry knows of each prefill, and which
// of its pairs are warm.
func (s *Server) serveBootstrap(ctx *fasthttp.RequestCtx) {
	out := struct {
		Prewarm         bool              `json:"prewarm"`
		PrefillDPPolicy string            `json:"prefill_dp_policy"`
		Prefills        []bootstrapStatus `json:"prefills"`
	}{Prewarm: s.warm != nil, PrefillDPPolicy: s.cfg.PrefillDPPolicy, Prefills: []bootstrapStatus{}}
	for _, b := range s.prefills.backends() {
		st := s.registry.State(b.index)
		bs := bootstrapStatus{
			URL: b.url, Bootstrap: net.JoinHostPort(b.host, strconv.Itoa(st.Port)), Ready: st.Ready,
			Port: st.Port, PortSource: st.PortSource, Ranks: st.Ranks, Error: st.Err,
			Generation: st.Generation, Updated: st.Updated,
		}
		if st.Ready {
			info := st.Info
			bs.Info = &info
		}
		if s.warm != nil {
			bs.Pairs = s.warm.status(b)
		}
		out.Prefills = append(out.Prefills, bs)
	}
	body, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		panic("BUG: cannot marshal the bootstrap report: " + err.Error())
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// markAborted marks the exchanges in flight that an /abort_request body
// names, by rid (a batch's, any of its items') or abort_all: a worker
// aborted mid-transfer answers with a KV transfer failure, which would
// otherwise be retried on a fresh pair, undoing the abort.
func (s *Server) markAborted(body []byte) {
	// Read as the workers read the body they are forwarded, so that the
	// exchanges marked are those the workers abort.
	all := gjson.ParseBytes(bootstrap.Member(body, "abort_all")).Bool()
	rid := gjson.ParseBytes(bootstrap.Member(body, "rid"))
	if !all && rid.Type != gjson.String {
		return
	}
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	for _, x := range s.flight {
		named := all
		if !named {
			eachRID(x.rid, func(r string) bool {
				named = r == rid.Str
				return !named
			})
		}
		if named {
			x.abortedByClient.Store(true)
		}
	}
}
