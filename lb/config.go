package lb

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/lb/policy"
)

// PrefillSpec names one prefill worker.
type PrefillSpec struct {
	// URL is the worker's HTTP API, e.g. "http://10.0.0.5:30000".
	URL string
	// BootstrapPort is the port of the worker's bootstrap server, sent to
	// both legs as bootstrap_port. Zero means none was given: pdlb then asks
	// the worker's /server_info for disaggregation_bootstrap_port and sends
	// JSON null until it knows, as mini_lb always does.
	BootstrapPort int
}

// Config is everything an lb.Server needs. The zero value of each optional
// field means its documented default.
type Config struct {
	// Prefill lists the prefill workers given at start. It may be empty:
	// the worker API or DNS then adds them at run time.
	Prefill []PrefillSpec
	// Decode lists the decode workers' URLs given at start; it may be
	// empty, as Prefill.
	Decode []string
	// DNS names workers found in DNS, who join and leave at run time
	// (dnsmembers.go). The zero value finds none.
	DNS DNSConfig
	// Kubernetes names pods found in Kubernetes, who join and leave at run
	// time (kubemembers.go). The zero value follows none.
	Kubernetes KubernetesConfig
	// APIKey, when set, is sglang_router's --api-key: pdlb sends it to the
	// workers ("Authorization: Bearer <key>") on every call it makes, and
	// requires it of clients on the generate routes, /flush_cache and
	// /abort_request. The health, info and metrics routes stay open, as
	// sglang_router's do.
	APIKey string
	// AdminAPIKey, when set, is required ("Authorization: Bearer <key>")
	// on the operator routes, those that act on every client or show the
	// workers' internals (operator.go): /flush_cache, /bootstrap, and an
	// /abort_request that names no single request, such as abort_all. It
	// is required on every listener, loopback and ServeAdmin's included,
	// and it opens the routes APIKey guards too. Empty means the operator
	// routes answer only on ServeAdmin's listeners and to loopback clients
	// (a 403 elsewhere), unless OpenOperatorRoutes.
	AdminAPIKey string
	// OpenOperatorRoutes, without an AdminAPIKey, serves the operator
	// routes to every client, as mini_lb does (APIKey still guards
	// /flush_cache and /abort_request): for repro scripts. False means
	// they are for operators.
	OpenOperatorRoutes bool
	// RequestIDHeaders are the headers a client's request ID is taken
	// from, the first present wins (sglang_router's --request-id-headers).
	// Empty means X-Request-Id. pdlb answers the ID, and passes it to the
	// workers, as X-Request-Id.
	RequestIDHeaders []string
	// Fallback lists aggregated (non-PD) workers that serve decode-only
	// traffic, forwarded unchanged. Empty means such traffic gets a 503.
	Fallback []string

	// PrefillPolicy and DecodePolicy select a backend in each pool: one of
	// Policies(). Empty means PolicyRandom.
	PrefillPolicy  string
	DecodePolicy   string
	FallbackPolicy string
	// CacheAware tunes cache_aware, as sglang_router's --cache-threshold,
	// --balance-abs-threshold, --balance-rel-threshold, --max-tree-size and
	// --eviction-interval-secs; zero fields take policy.DefaultCacheAware's.
	CacheAware policy.CacheAwareConfig
	// Manual tunes manual (sglang_router's --max-idle-secs and
	// --assignment-mode); zero fields take policy.DefaultManual's.
	Manual policy.ManualConfig
	// PrefixHashTokens is how many of a prompt's first tokens prefix_hash
	// hashes; zero means 256, sglang_router's.
	PrefixHashTokens int
	// LoadCheckInterval is how often the workers' loads are read for the
	// policies that weigh them (sglang_router's
	// --worker-load-check-interval); zero means a second.
	LoadCheckInterval time.Duration

	// PDMinPromptTokens sends requests whose prompt is estimated shorter
	// (bootstrap.Request.PromptTokens) to the decode-only path. Zero means
	// every request goes PD.
	PDMinPromptTokens int
	// DecodeLocalPrefill sends decode-only /generate traffic to a decode
	// with "do_local_prefill": true (SGLang PR #34773) instead of the
	// fallback pool.
	DecodeLocalPrefill bool

	// RequestTimeout bounds a whole generation, streams included, as
	// mini_lb's --request-timeout-secs does, give or take deadlineStep (on
	// worker connections it is rounded up to one). Zero means 1800 s.
	RequestTimeout time.Duration
	// FirstByteTimeout bounds the wait for a stream's first byte from the
	// decode (a non-stream answer has none before it is whole, so only
	// RequestTimeout bounds it). Zero means 300 s, SGLang's own KV wait.
	FirstByteTimeout time.Duration
	// StreamIdleTimeout bounds the silence between two stream events from
	// the decode. Zero means 300 s.
	StreamIdleTimeout time.Duration
	// ClientWriteTimeout bounds each write to a client, so a client that
	// stops reading cannot hold a stream and its workers. Zero means 60 s.
	ClientWriteTimeout time.Duration
	// ClientStallTimeout bounds how long a stream's write to its client may
	// wait for the client to read: the socket's buffers are the stream's
	// buffer, and a client that falls that far behind for this long has
	// its stream ended (both calls cancelled, the workers told to abort,
	// the connection closed), so that it holds its decode connection no
	// longer. At most ClientWriteTimeout. Zero means 10 s.
	ClientStallTimeout time.Duration

	// MaxRetries is how many more attempts a request may get after one
	// that failed before anything reached the client. Zero means 2.
	MaxRetries int
	// DisableRetries makes every request a single attempt.
	DisableRetries bool

	// MaxConcurrentRequests bounds the generate requests in flight; beyond,
	// they wait in a queue of QueueSize for at most QueueTimeout, then get
	// a 429. Zero means no bound.
	MaxConcurrentRequests int
	// QueueSize is the most requests that wait for a slot. Zero means 256;
	// below zero, none wait: beyond the limit they get a 429 at once.
	QueueSize int
	// QueueTimeout is the longest a request waits for a slot. Zero means
	// 60 s.
	QueueTimeout time.Duration
	// MaxConnsPerBackend caps pooled connections to each worker; requests
	// beyond it wait for a free connection. Zero means 4096.
	MaxConnsPerBackend int
	// MaxAbortsPerSecond caps the /abort_request calls pdlb sends each
	// worker for requests it gave up on, a second; a worker may get that
	// many at once after a quiet second. Beyond, they are dropped and
	// counted (pdlb_abort_requests_dropped_total): the worker aborts those
	// requests itself once it sees their connections closed. Zero means
	// 100.
	MaxAbortsPerSecond int
	// IdleConnTimeout drops pooled connections idle this long. It must stay
	// below the workers' own keep-alive (uvicorn closes after 5 s) so pdlb
	// never writes to a connection the worker is closing; a second is
	// margin enough. Zero means 4 s.
	IdleConnTimeout time.Duration
	// ConnectTimeout is the longest a new connection to a worker may take,
	// queueing for a dialer included (dial.go); a worker that does not
	// accept in time is unreachable for the request, which goes to another.
	// Without it a worker that drops connection attempts would hold each
	// new connection for the kernel's SYN retries, about two minutes. Zero
	// means 5 s.
	ConnectTimeout time.Duration
	// MaxRequestBodySize is the largest client body accepted; larger ones
	// get a 413. Zero means 64 MiB.
	MaxRequestBodySize int
	// MaxBodyMemory bounds the bodies held in memory at once: the clients'
	// bodies as they arrive, the copies rewritten for the workers (batch
	// expansion included), and the workers' answers read whole (merged
	// ones included). A request that would cross it gets a 503. It must
	// hold what one request of MaxRequestBodySize may need: three such
	// bodies (the client's, the decode's and the prefill's) with pdlb's
	// fields for the largest batch. Zero means 1 GiB, or that if it is
	// more.
	MaxBodyMemory int64
	// MaxBatchSize is the most items a /generate batch may hold; larger
	// ones get a 400. pdlb writes three fields for each item, so a batch of
	// empty items would otherwise grow many times over on its way to the
	// workers. Zero means 4096, the most requests an SGLang worker runs at
	// once (its req_to_token_pool holds 2,048 to 4,096).
	MaxBatchSize int
	// MaxResponseBodySize is the largest non-streamed worker answer read.
	// Zero means 256 MiB.
	MaxResponseBodySize int
	// ClientIdleTimeout closes client keep-alive connections idle this long.
	// Zero means 90 s.
	ClientIdleTimeout time.Duration
	// MaxConnections bounds the client connections open at once, so that
	// clients cannot take the descriptors pdlb needs for its workers
	// (connlimit.go). At the bound, a connection that has sent nothing is
	// closed to make room, else the one waiting longest for its client
	// (its next request, or the rest of one); with none waiting, a new
	// connection gets a 503 and is closed. Zero means derived from the
	// process's descriptor limit (defaultMaxConnections): what is left after 64 descriptors, 8 a
	// worker, and MaxConnsPerBackend a worker, but at least a third of
	// what the 64 and 8s leave, and at most 65,536. Below zero, no bound
	// but fasthttp's own (262,144, refused without a word of JSON).
	MaxConnections int
	// ClientReadTimeout bounds reading a client's request. Zero means 60 s.
	ClientReadTimeout time.Duration
	// MaxHeaderSize is the largest request header accepted; larger ones get
	// a 431. A client connection holds a read buffer this large while it
	// reads a request. Zero means 4 KiB.
	MaxHeaderSize int

	// AccessLog writes one info-level line per finished request, whatever
	// the level of the logger New is given: they are what the operator
	// asked for.
	AccessLog bool

	// NoPrewarm turns off pair warm-up, for decodes without SGLang's
	// first-request bug (see package bootstrap's documentation): requests
	// carrying disagg_prefill_dp_rank then go out without waiting for a warm
	// pair.
	NoPrewarm bool
	// DrainTimeout bounds how long a removed worker's requests and streams
	// in flight may finish before it is torn down (membership.go;
	// --drain-timeout-secs). Zero means 180 s, the default shutdown grace
	// period.
	DrainTimeout time.Duration
	// WarmupTimeout bounds one pair warm-up, and a request's wait for it
	// (a 503 after). Zero means 30 s.
	WarmupTimeout time.Duration
	// PrefillDPPolicy picks the prefill DP rank of requests that name none:
	// one of DPPolicies(). Empty means DPPolicyOff, mini_lb's behaviour.
	PrefillDPPolicy string
	// HealthCheck configures the active health checks of every worker.
	HealthCheck HealthCheckConfig
	// Breaker configures the passive failure tracking of every worker.
	Breaker BreakerConfig

	// BootstrapRefresh is how often the registry re-reads a ready prefill's
	// bootstrap server, to see it go away or change. Zero means 5 s.
	BootstrapRefresh time.Duration

	// WorkerTLS configures the connections to workers whose URL is https.
	// Nil means Go's defaults: the system's roots (SSL_CERT_FILE).
	WorkerTLS *tls.Config
	// Dial connects to a worker address ("host:port"). Nil means TCP over
	// IPv4 and IPv6, with fasthttp's dialer; tests pass in-memory listeners.
	Dial fasthttp.DialFunc
	// NewRoom draws a bootstrap_room. Nil means bootstrap.NewRoom.
	NewRoom func() uint64
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// HealthCheckConfig configures the active health checks.
type HealthCheckConfig struct {
	// Disable turns active checks off: every worker is taken as up, and a
	// prefill whose bootstrap server cannot be reached stays selectable.
	Disable bool
	// Path is probed with GET on each worker. Empty means /health.
	Path string
	// Interval is the time between two probes of a worker. Zero means 5 s.
	Interval time.Duration
	// Timeout bounds a probe. Zero means 2 s.
	Timeout time.Duration
	// Rise and Fall are the consecutive successes that bring a worker back
	// and failures that take it out. Zero means 2 and 3.
	Rise, Fall int
}

// BreakerConfig configures the passive failure tracking: consecutive
// transport errors, timeouts and 5xx answers (never a 4xx) eject a worker.
type BreakerConfig struct {
	// Disable turns it off.
	Disable bool
	// Threshold is the consecutive failures that eject a worker. Zero
	// means 5.
	Threshold int
	// MinBackoff is the first ejection; it doubles while the worker keeps
	// failing its trials, up to MaxBackoff. Zero means 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
}

// isHeaderName reports whether name is an HTTP field name: a token of
// RFC 9110 §5.6.2.
func isHeaderName(name string) bool { return isToken(name) }

// Validate reports the first problem with c, phrased for a command line user.
func (c *Config) Validate() error {
	if err := c.checkWorkers(); err != nil {
		return err
	}
	if c.PDMinPromptTokens < 0 {
		return fmt.Errorf("the minimum prompt length for PD cannot be negative")
	}
	for _, key := range []struct{ name, key string }{{"API key", c.APIKey}, {"admin API key", c.AdminAPIKey}} {
		if strings.ContainsFunc(key.key, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return fmt.Errorf("the %s holds a control character, which no client could send in a header", key.name)
		}
	}
	if c.AdminAPIKey != "" && c.AdminAPIKey == c.APIKey {
		return fmt.Errorf("the admin API key is the API key: every client holding it could flush every cache and abort every request")
	}
	for _, h := range c.RequestIDHeaders {
		if !isHeaderName(h) {
			return fmt.Errorf("invalid request-ID header name %q", h)
		}
	}
	for _, p := range []string{c.PrefillPolicy, c.DecodePolicy, c.FallbackPolicy} {
		if p == "" {
			continue
		}
		if err := CheckPolicy(p); err != nil {
			return err
		}
	}
	if err := c.checkRouting(); err != nil {
		return err
	}
	if err := c.checkBodyMemory(); err != nil {
		return err
	}
	if c.PrefillDPPolicy != "" {
		if err := checkDPPolicy(c.PrefillDPPolicy); err != nil {
			return err
		}
	}
	return nil
}

// checkWorkers refuses a worker's URL or bootstrap port that is not one,
// and a worker listed twice. A pool may start empty (issue 23 §1): the
// worker API or discovery fills it, and /readiness says what is missing
// until then (New warns of a pool nothing will fill but the API).
func (c *Config) checkWorkers() error {
	if err := c.DNS.check(); err != nil {
		return err
	}
	if err := c.Kubernetes.check(); err != nil {
		return err
	}
	for _, p := range c.Prefill {
		if _, err := parseWorkerURL(p.URL); err != nil {
			return fmt.Errorf("invalid prefill URL: %w", err)
		}
		if p.BootstrapPort < 0 || p.BootstrapPort > 65535 {
			return fmt.Errorf("invalid bootstrap port %d for prefill %s", p.BootstrapPort, p.URL)
		}
	}
	for _, d := range c.Decode {
		if _, err := parseWorkerURL(d); err != nil {
			return fmt.Errorf("invalid decode URL: %w", err)
		}
	}
	for _, f := range c.Fallback {
		if _, err := parseWorkerURL(f); err != nil {
			return fmt.Errorf("invalid fallback URL: %w", err)
		}
	}
	return c.checkDuplicates()
}

// checkDuplicates refuses a worker listed twice. A backend's metrics, logs
// and health state are keyed by its host:port, so two URLs that name one
// (http://h:p and http://h:p/, or https://h:p) would clash; and an SGLang
// server has one role, so one listed in two pools is a mistake as well.
func (c *Config) checkDuplicates() error {
	seen := make(map[string]string) // host:port → "--role URL"
	add := func(role, raw string) error {
		w, err := parseWorkerURL(raw)
		if err != nil {
			panic("BUG: checkDuplicates on an unchecked URL: " + err.Error())
		}
		key := strings.ToLower(w.addr) // host names are case-insensitive
		if ip, err := netip.ParseAddr(w.host); err == nil {
			// One address spelled many ways: [::1], [0:0:0:0:0:0:0:1].
			_, port, _ := net.SplitHostPort(w.addr)
			key = net.JoinHostPort(ip.Unmap().String(), port)
		}
		this := "--" + role + " " + raw
		if first, ok := seen[key]; ok {
			return fmt.Errorf("worker %s is listed twice: %s and %s", w.addr, first, this)
		}
		seen[key] = this
		return nil
	}
	for _, p := range c.Prefill {
		if err := add(rolePrefill, p.URL); err != nil {
			return err
		}
	}
	for _, d := range c.Decode {
		if err := add(roleDecode, d); err != nil {
			return err
		}
	}
	for _, f := range c.Fallback {
		if err := add(roleFallback, f); err != nil {
			return err
		}
	}
	return nil
}

// checkBodyMemory refuses a body budget that a single request of the
// largest size allowed could not fit in. Such a request would get a 503
// forever.
func (c *Config) checkBodyMemory() error {
	if need := c.minBodyMemory(); c.MaxBodyMemory > 0 && c.MaxBodyMemory < need {
		return fmt.Errorf("--max-body-memory %d is less than the %d bytes one request of --max-payload-size %d may need "+
			"(its body, and a copy with pdlb's fields for each worker): raise it or lower --max-payload-size",
			c.MaxBodyMemory, need, c.maxRequestBody())
	}
	return nil
}

// minBodyMemory is what one request of the largest size allowed holds in
// the body memory at most: its body, and two copies of it with pdlb's
// fields in (the decode's, and the prefill's when they differ), for the
// largest batch and the longest prefill host.
func (c *Config) minBodyMemory() int64 {
	batch := c.MaxBatchSize
	if batch <= 0 {
		batch = defaultMaxBatchSize
	}
	host := ""
	for _, p := range c.Prefill {
		if w, err := parseWorkerURL(p.URL); err == nil && len(w.host) > len(host) {
			host = bootstrap.Host(w.host)
		}
	}
	body := int64(c.maxRequestBody())
	return body + 2*(body+int64(bootstrap.MaxAdded(host, batch)))
}

// maxRequestBody is MaxRequestBodySize, or its default.
func (c *Config) maxRequestBody() int {
	if c.MaxRequestBodySize > 0 {
		return c.MaxRequestBodySize
	}
	return defaultMaxRequestBodySize
}

// checkRouting refuses parameters of the routing policies that no policy
// could follow.
func (c *Config) checkRouting() error {
	ca := c.CacheAware
	switch {
	case ca.CacheThreshold < 0 || ca.CacheThreshold > 1:
		return fmt.Errorf("the cache threshold must be between 0 and 1, got %g", ca.CacheThreshold)
	case ca.BalanceAbsThreshold < 0:
		return fmt.Errorf("the balance absolute threshold must not be negative, got %d", ca.BalanceAbsThreshold)
	case ca.BalanceRelThreshold < 0:
		return fmt.Errorf("the balance relative threshold must not be negative, got %g", ca.BalanceRelThreshold)
	case ca != (policy.CacheAwareConfig{}) && (ca.MaxTreeSize <= 0 || ca.EvictionInterval <= 0):
		return fmt.Errorf("cache_aware's tree size and eviction interval must be positive")
	case c.Manual.MaxIdle < 0:
		return fmt.Errorf("manual's idle time must not be negative")
	case c.PrefixHashTokens < 0 || c.LoadCheckInterval < 0:
		return fmt.Errorf("the prefix hash's tokens and the load check interval must not be negative")
	}
	if c.Manual.Assignment != "" {
		return policy.CheckAssignment(c.Manual.Assignment)
	}
	return nil
}
