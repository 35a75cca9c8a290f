package lb

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// route is one path pdlb serves, with its metrics. Routes are built once in
// New; their counters are created on first use of each status code, so the
// request path never formats a metric name twice.
type route struct {
	path   string
	method string
	// generate marks the PD routes; batch marks /generate, the only route
	// whose list-valued text or input_ids makes a batch.
	generate bool
	batch    bool
	// keyed routes need the client to present the API key, when pdlb has
	// one (Config.APIKey): the generate routes, /flush_cache and
	// /abort_request.
	keyed bool
	// forOperators, when set, tells the route's requests that are for
	// operators only (operator.go).
	forOperators operatorRule
	// readsBody marks a control route whose body is read, at most
	// maxControlBody bytes, before its rules, which may look at it.
	readsBody bool

	ms       *metrics.Set
	byStatus [600]atomic.Pointer[metrics.Counter]
	duration *metrics.PrometheusHistogram
	// ttfb is the time to the first streamed byte (generate routes only).
	ttfb *metrics.PrometheusHistogram
}

func newRoute(ms *metrics.Set, path, method string, generate bool) *route {
	rt := &route{
		path:      path,
		method:    method,
		generate:  generate,
		batch:     path == "/generate",
		keyed:     generate || path == "/flush_cache" || path == "/abort_request",
		readsBody: path == "/abort_request",
		ms:        ms,
		duration:  ms.NewPrometheusHistogram(fmt.Sprintf(`pdlb_request_duration_seconds{route=%q}`, path)),
	}
	rt.forOperators = operatorRuleOf(path)
	if generate {
		rt.ttfb = ms.NewPrometheusHistogram(fmt.Sprintf(`pdlb_stream_first_byte_seconds{route=%q}`, path))
	}
	return rt
}

// observe accounts one finished request.
func (rt *route) observe(status int, took time.Duration) {
	rt.count(status)
	rt.duration.Update(took.Seconds())
}

// count accounts one finished request whose duration is unknown.
func (rt *route) count(status int) {
	if status < 100 || status >= len(rt.byStatus) {
		status = 0
	}
	c := rt.byStatus[status].Load()
	if c == nil {
		c = rt.ms.GetOrCreateCounter(fmt.Sprintf(`pdlb_requests_total{route=%q,code="%d"}`, rt.path, status))
		rt.byStatus[status].Store(c)
	}
	c.Inc()
}

// serverMetrics are the counters a Server keeps besides its routes' and
// backends': created once in New, in the server's own set, so that the
// request path only increments them.
type serverMetrics struct {
	// errorsByReason counts pdlb's own error answers (writeError).
	errorsByReason [numReasons]*metrics.Counter
	coldRetries    *metrics.Counter
	// staleRankRetries counts attempts made again after a prefill refused
	// a DP rank the registry gave it.
	staleRankRetries *metrics.Counter
	// unplaced counts requests --prefill-dp-policy could not place, their
	// pair not being warm: they go as mini_lb sends them.
	unplaced   *metrics.Counter
	decodeOnly [numDecodeOnly]*metrics.Counter
	retries    *metrics.Counter
	aborts     *metrics.Counter
	// abortsDropped counts the aborts a worker's abortGate kept back.
	abortsDropped *metrics.Counter
	// connsEvicted and connsRefused count the client connections the
	// connection budget closed to make room, and those it refused.
	connsEvicted, connsRefused *metrics.Counter
}

// init creates the counters in ms.
func (m *serverMetrics) init(ms *metrics.Set) {
	for r := range numReasons {
		m.errorsByReason[r] = ms.NewCounter(fmt.Sprintf(`pdlb_request_errors_total{reason=%q}`, r))
	}
	m.coldRetries = ms.NewCounter(`pdlb_cold_pair_retries_total`)
	m.staleRankRetries = ms.NewCounter(`pdlb_stale_dp_rank_retries_total`)
	m.unplaced = ms.NewCounter(`pdlb_dp_policy_unplaced_total`)
	m.retries = ms.NewCounter(`pdlb_retries_total`)
	m.aborts = ms.NewCounter(`pdlb_abort_requests_total`)
	m.abortsDropped = ms.NewCounter(`pdlb_abort_requests_dropped_total`)
	m.connsEvicted = ms.NewCounter(`pdlb_client_connections_evicted_total`)
	m.connsRefused = ms.NewCounter(`pdlb_client_connections_refused_total`)
	for w := pdMode + 1; w < numDecodeOnly; w++ { // PD requests are not decode-only
		m.decodeOnly[w] = ms.NewCounter(fmt.Sprintf(`pdlb_decode_only_total{reason=%q}`, w))
	}
}
