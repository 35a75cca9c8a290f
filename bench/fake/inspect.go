package fake

import (
	"bytes"
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// What a test in another process reads from a fake (`pdlb fake`): the
// counters, on a route SGLang does not have, and the count of requests that
// carried a planted canary. Both are off unless asked for, so a fake that
// stands in for SGLang answers only SGLang's routes, and spends nothing on
// the canary.

// StatsPath is the route that answers GET with Stats as JSON when
// Config.StatsRoute is set.
const StatsPath = "/fake/stats"

// serveStats answers StatsPath: the counters, as encoding/json writes
// Stats, so a test decodes them into a Stats of its own.
func (s *Server) serveStats(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	body, err := json.Marshal(s.Stats())
	if err != nil {
		panic("BUG: cannot marshal the fake's stats: " + err.Error())
	}
	writeJSON(ctx, fasthttp.StatusOK, body)
}

// countCanary counts the request in Stats.Canaries when Config.Canary
// appears in its headers (names or values, trailers included, in any case:
// a header name may have been normalised on its way) or, byte for byte, in
// its body.
func (s *Server) countCanary(ctx *fasthttp.RequestCtx) {
	if s.canary == nil {
		return
	}
	found := bytes.Contains(ctx.PostBody(), []byte(s.cfg.Canary)) ||
		s.hasCanary(ctx.Request.Header.RawHeaders())
	h := &ctx.Request.Header
	for k, v := range h.All() {
		if found {
			break
		}
		found = s.hasCanary(k) || s.hasCanary(v)
	}
	for k := range h.Trailers() { // fasthttp keeps trailer fields apart
		if found {
			break
		}
		found = s.hasCanary(k) || s.hasCanary(h.PeekBytes(k))
	}
	if found {
		s.st.canaries.Add(1)
	}
}

// hasCanary reports whether b holds the canary, in any case.
func (s *Server) hasCanary(b []byte) bool {
	return bytes.Contains(bytes.ToLower(b), s.canary)
}
