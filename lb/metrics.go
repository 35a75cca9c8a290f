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
