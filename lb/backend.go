package lb

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/health"
	"pdlb/lb/policy"
	"pdlb/lb/wire"
)

// Roles of a backend, used in logs and metric labels.
const (
	rolePrefill  = "prefill"
	roleDecode   = "decode"
	roleFallback = "fallback"
)

// Backend is one worker: its pooled client, load and metrics. It is shared by
// every request and safe for concurrent use; never copy it.
type Backend struct {
	role string
	// index is a prefill's target in the bootstrap registry.
	index int
	// slot is the backend's index in its pool's slots (membership.go):
	// package policy's worker index, stable while it is a member.
	slot int
	// probe is its target in the health checker, -1 when not checked.
	probe int
	// leaving is set once the backend is removed: it takes no new
	// request, even through a pick that read the pool before (drain).
	leaving atomic.Bool
	// sources are who give the worker (a source, sources.go), changed
	// under Server.membersMu; 0 once it is removed.
	sources atomic.Uint32
	// series are the names of its metrics, unregistered after its drain.
	series []string
	// url is the worker URL as configured, without a trailing slash.
	url  string
	addr string
	// bootstrapHost is the URL's host formatted for bootstrap_host.
	bootstrapHost string
	// host is the URL's host, unformatted.
	host string
	// authorization is the Authorization header of every call to the
	// worker when pdlb has an API key (Config.APIKey), else nil.
	authorization []byte

	// epoch grows on every sign that the worker may have restarted: it
	// refused or dropped pdlb's connections, failed a health probe, or its
	// health checks found it up again after down (restart.go); a decode's
	// pairs are warmed again after.
	epoch atomic.Uint64
	// restarted is set on every sign that the worker may have restarted
	// (restart.go), and cleared by the first probe it answers after, which
	// warms its cold pairs at once.
	restarted atomic.Bool
	// dpSize is the worker's dp_size, 0 while unknown: a prefill's is the
	// bootstrap registry's, a decode's is learned when its pairs are warmed.
	// Requests that name a DP rank go only to workers that have it.
	dpSize atomic.Int32
	// dpReads counts a decode's reads of its /server_info for dpSize, done
	// one at a time under dpReadMu (relearnDecode).
	dpReads  atomic.Uint64
	dpReadMu sync.Mutex
	dpReadAt atomic.Int64 // when dpReads last grew, in Unix nanoseconds
	// ranks is a prefill's load per DP rank (--prefill-dp-policy).
	ranks atomic.Pointer[rankLoad]

	hc  *fasthttp.HostClient
	log zerolog.Logger

	inflight atomic.Int32
	// prefixes is the pool's cache_aware tree when the pool routes by
	// one: what pdlb believes b has cached, forgotten when b's cache is
	// known emptied (forgetPrefixes).
	prefixes *policy.CacheAware
	// meanInflight is inflight averaged over about a second, in
	// thousandths (see smoothLoads), for prefix_hash's load bound.
	meanInflight atomic.Int64
	// health is what active checks know (a health.State); breaker tracks
	// failures of real requests, nil when disabled; bootstrapDown is set
	// when a prefill's bootstrap server cannot be reached.
	health        atomic.Int32
	breaker       *health.Breaker
	bootstrapDown atomic.Bool

	// aborts bounds the /abort_request calls pdlb sends the worker.
	aborts abortGate

	requests *metrics.Counter
	errors   *metrics.Counter
	// ejections counts the breaker's openings; nil without a breaker.
	ejections *metrics.Counter
}

// workerURL is a parsed worker address.
type workerURL struct {
	tls  bool
	addr string // host:port, IPv6 hosts bracketed
	host string // hostname without brackets or port
}

func parseWorkerURL(raw string) (workerURL, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return workerURL{}, err
	}
	var w workerURL
	switch u.Scheme {
	case "http":
	case "https":
		w.tls = true
	default:
		return workerURL{}, fmt.Errorf("%q: scheme must be http or https", raw)
	}
	w.host = u.Hostname()
	if w.host == "" {
		return workerURL{}, fmt.Errorf("%q has no host", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return workerURL{}, fmt.Errorf("%q: a worker URL cannot have a path", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		// pdlb would drop them without a word.
		return workerURL{}, fmt.Errorf("%q: a worker URL cannot have a query, a fragment or credentials", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if w.tls {
			port = "443"
		}
	} else if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return workerURL{}, fmt.Errorf("%q: invalid port", raw)
	} else {
		port = strconv.Itoa(n) // "030010" is 30010: one worker, one address
	}
	w.addr = net.JoinHostPort(w.host, port)
	return w, nil
}

// bearer is the Authorization header value that presents key.
func bearer(key string) string { return "Bearer " + key }

// authorize sets the worker's Authorization header on h when pdlb has an
// API key; the client's own, forwarded, is then replaced.
func (b *Backend) authorize(h *fasthttp.RequestHeader) {
	if b.authorization != nil {
		h.SetBytesV(fasthttp.HeaderAuthorization, b.authorization)
	}
}

// setURI points req at uri (a path and query) on b, over https when b is
// reached so: fasthttp refuses a request whose scheme is not its client's,
// and a URI with a scheme writes its own host as the Host header.
func (b *Backend) setURI(req *fasthttp.Request, uri []byte) {
	req.SetRequestURIBytes(uri)
	if b.hc.IsTLS {
		req.URI().SetScheme("https")
		req.URI().SetHost(b.addr)
	}
}

// workerLink is how a Server's backends reach their workers.
type workerLink struct {
	dialer *wire.Dialer
	steps  wire.Steps
	// quit closes when the server shuts down: the dialers stop.
	quit <-chan struct{}
}

// givenBy is the set of sources that give b.
func (b *Backend) givenBy() source { return source(b.sources.Load()) }

// newBackend makes the backend of a worker, reached through link.
func newBackend(role string, index int, rawURL string, cfg *Config, ms *metrics.Set, log zerolog.Logger, link workerLink) (*Backend, error) {
	w, err := parseWorkerURL(rawURL)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		role:          role,
		index:         index,
		slot:          index,
		probe:         -1,
		url:           strings.TrimSuffix(rawURL, "/"),
		addr:          w.addr,
		bootstrapHost: bootstrap.Host(w.host),
		host:          w.host,
		log:           log.With().Str("role", role).Str("backend", w.addr).Logger(),
	}
	if cfg.APIKey != "" {
		b.authorization = []byte(bearer(cfg.APIKey))
	}
	if !cfg.Breaker.Disable {
		b.breaker = health.NewBreaker(health.BreakerConfig{
			Threshold:  cfg.Breaker.Threshold,
			MinBackoff: cfg.Breaker.MinBackoff,
			MaxBackoff: cfg.Breaker.MaxBackoff,
			Now:        cfg.Now,
		})
	}
	b.hc = &fasthttp.HostClient{
		Addr:                w.addr,
		IsTLS:               w.tls,
		TLSConfig:           cfg.WorkerTLS,
		Name:                "pdlb",
		MaxConns:            cfg.MaxConnsPerBackend,
		MaxConnWaitTimeout:  cfg.RequestTimeout,
		MaxIdleConnDuration: cfg.IdleConnTimeout,
		MaxResponseBodySize: cfg.MaxResponseBodySize,
		// A stream holds its reader for its whole life; workers' headers
		// are small, and a larger body is read past the buffer.
		ReadBufferSize:                2 << 10,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		NoDefaultUserAgentHeader:      true,
		Transport:                     wire.Transport{Steps: link.steps},
		RetryIfErr:                    wire.RetryStaleConn,
	}
	b.hc.DialTimeout = wire.NewDialers(link.dialer.DialWorker, cfg.ConnectTimeout, link.quit).Dial
	b.registerSeries(ms)
	return b, nil
}

// registerSeries makes b's metric series in ms.
func (b *Backend) registerSeries(ms *metrics.Set) {
	labels := b.labels()
	b.requests = ms.NewCounter(b.series1(`pdlb_backend_requests_total{` + labels + `}`))
	b.errors = ms.NewCounter(b.series1(`pdlb_backend_errors_total{` + labels + `}`))
	ms.NewGauge(b.series1(`pdlb_backend_inflight{`+labels+`}`), func() float64 { return float64(b.inflight.Load()) })
	ms.NewGauge(b.series1(`pdlb_backend_up{`+labels+`}`), func() float64 {
		if b.available() {
			return 1
		}
		return 0
	})
	// Up is 0 while a removed worker drains: draining says so, that a
	// dashboard may tell a worker leaving from one down.
	ms.NewGauge(b.series1(`pdlb_backend_draining{`+labels+`}`), func() float64 {
		if b.leaving.Load() {
			return 1
		}
		return 0
	})
	if b.breaker != nil {
		b.ejections = ms.NewCounter(b.series1(`pdlb_backend_ejections_total{` + labels + `}`))
	}
}

// labels are the labels of b's metric series.
func (b *Backend) labels() string { return fmt.Sprintf(`role=%q,backend=%q`, b.role, b.addr) }

// series1 records name as one of b's metric series, and returns it.
func (b *Backend) series1(name string) string {
	b.series = append(b.series, name)
	return name
}

// available reports whether b may be selected for new requests: not known
// down by active checks (a worker not yet probed counts as up, so pdlb
// serves from its first instant), not ejected by its breaker, and for a
// prefill, with a reachable bootstrap server; and not removed.
func (b *Backend) available() bool {
	return health.State(b.health.Load()) != health.Down && !b.bootstrapDown.Load() && !b.leaving.Load() &&
		(b.breaker == nil || b.breaker.Allow())
}

// markedDown reports whether b's health checks find it down. Unlike
// available, it asks the breaker nothing, so it takes no trial request.
func (b *Backend) markedDown() bool {
	return health.State(b.health.Load()) == health.Down
}

// takes reports whether b may serve a request that needs DP rank rank (-1
// for none): b has that rank, or its dp_size is unknown.
func (b *Backend) takes(rank int) bool {
	if rank < 0 {
		return true
	}
	n := int(b.dpSize.Load())
	return n == 0 || rank < n
}

// confirmed reports whether b is available and known up, for /readiness.
func (b *Backend) confirmed(checked bool) bool {
	return b.available() && (!checked || health.State(b.health.Load()) == health.Up)
}

// succeeded and failed report a request's outcome to b's breaker.
func (b *Backend) succeeded() {
	if b.breaker != nil {
		b.breaker.Success()
	}
}

// failed's status is the worker's answer, 0 when it gave none; err is
// what went wrong besides: the transport error, or why a streamed answer
// broke off. The ejection's log line names the failure that caused it.
func (b *Backend) failed(err error, status int) {
	if b.breaker != nil && b.breaker.Failure() {
		b.ejections.Inc()
		ev := b.log.Warn().Err(err)
		if status != 0 {
			ev = ev.Int("status", status)
		}
		ev.Msg("ejecting the worker after consecutive failures")
	}
}

// get performs one control call on b. It carries pdlb's key for b, if
// there is one (--api-key), else the client's Authorization header. A
// worker behind a key then answers a client that has it, as on the
// generate routes, which forward the client's headers.
func (b *Backend) get(cc controlCall) answer {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(cc.method)
	b.setURI(req, []byte(cc.uri))
	req.Header.SetHost(b.addr)
	if cc.body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(cc.body)
	}
	if len(cc.clientAuth) > 0 {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, cc.clientAuth)
	}
	b.authorize(&req.Header) // pdlb's key, if it has one, goes instead
	a := answer{backend: b}
	deadline := time.Now().Add(cc.timeout)
	a.err = b.hc.DoDeadline(req, resp, deadline)
	if a.err != nil && wire.IsConnDrop(a.err) {
		// A kept-alive connection of a worker that has restarted since:
		// these calls (reads, and an idempotent flush) may be made twice,
		// so once more on a new connection, in the time left.
		a.err = b.hc.DoDeadline(req, resp, deadline)
	}
	if a.err == nil {
		a.status = resp.StatusCode()
		a.body = append([]byte(nil), resp.Body()...)
	}
	return a
}

// learnDPSize reads the decode's dp_size from its /server_info; 1 when it
// does not say. A failed read returns 1 and leaves what b knew.
func (b *Backend) learnDPSize(ctx context.Context, now func() time.Time) int {
	timeout := controlTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	a := b.get(controlCall{method: fasthttp.MethodGet, uri: "/server_info", timeout: timeout})
	n := 1
	if v := gjson.GetBytes(a.body, "dp_size"); a.ok() && v.Type == gjson.Number && v.Int() > 1 && v.Int() <= 1024 {
		n = int(v.Int())
	}
	if a.ok() {
		b.dpSize.Store(int32(n))
	}
	b.dpReadAt.Store(now().UnixNano())
	b.dpReads.Add(1)
	return n
}

// rankLoad returns b's per-rank load for the registry state st, starting a
// fresh one when the prefill's DP layout may have changed.
func (b *Backend) rankLoad(st *bootstrap.State) *rankLoad {
	for {
		cur := b.ranks.Load()
		if cur != nil && cur.generation == st.Generation && len(cur.inflight) == st.Info.DPSize {
			return cur
		}
		fresh := &rankLoad{generation: st.Generation, inflight: make([]atomic.Int32, st.Info.DPSize)}
		if b.ranks.CompareAndSwap(cur, fresh) {
			return fresh
		}
	}
}

// forgetPrefixes empties what cache_aware believes b holds: b restarted,
// came back from down, or had its cache flushed, and holds nothing. Its
// prefixes would otherwise draw their requests to it as matches, while
// they are misses there.
func (b *Backend) forgetPrefixes() {
	if b.prefixes != nil {
		b.prefixes.RemoveWorker(b.slot)
	}
}
