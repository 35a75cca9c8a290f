package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"pdlb/lb"

	"pdlb/internal/cli"
)

// Command is `pdlb serve`, pdlb's default command: it runs the load
// balancer. Flag names follow sglang_router's, so a
// mini_lb command line works unchanged.
type Command struct {
	Prefill  prefillFlags `help:"A prefill worker URL, optionally followed by its bootstrap port or 'none'; repeat for more. Without a port pdlb asks the worker's /server_info, and sends null until it knows." placeholder:"URL [PORT]" group:"workers"`
	Decode   []string     `help:"A decode worker URL; repeat for more (or list them with commas)." placeholder:"URL" sep:"," group:"workers"`
	Fallback []string     `help:"An aggregated (non-PD) SGLang worker for decode-only traffic, which gets the client's body unchanged; repeat for more (or list them with commas)." placeholder:"URL" sep:"," group:"workers"`

	Host        string `help:"Address to listen on." default:"0.0.0.0" group:"listen"`
	Port        int    `help:"Port to listen on." default:"30000" type:"port" group:"listen"`
	APIKey      string `help:"sglang_router's --api-key: sent to the workers as 'Authorization: Bearer KEY' on every call, and required of clients on the generate routes, /flush_cache and /abort_request." placeholder:"KEY" group:"listen"`
	AdminAPIKey string `help:"Key required, as 'Authorization: Bearer KEY', on the operator routes (/flush_cache, /bootstrap, /abort_request but by one rid), on every listener; it opens the --api-key routes too. Without it they answer only on the --prometheus-port and --pprof-addr listeners and to loopback clients (a 403 elsewhere), unless --mini-lb." placeholder:"KEY" group:"listen"`

	Policy             string `help:"How to pick a worker in each pool: random (mini_lb's), round_robin or power_of_two (fewer requests in flight of two random picks). sglang_router's other policies fall back to random with a warning." default:"random" group:"routing"`
	PrefillPolicy      string `help:"Policy for the prefill pool (default: --policy)." group:"routing"`
	DecodePolicy       string `help:"Policy for the decode pool (default: --policy)." group:"routing"`
	FallbackPolicy     string `help:"Policy for the fallback pool (default: --policy)." group:"routing"`
	PDMinPromptTokens  int    `help:"Send prompts shorter than this many tokens (estimated: input_ids, or 4 bytes of text a token) decode-only, where a remote prefill costs more than it saves; 0 sends every prompt PD." default:"0" group:"routing"`
	DecodeLocalPrefill bool   `help:"Send decode-only /generate traffic to a decode with do_local_prefill (SGLang PR #34773, decode flag --disaggregation-decode-enable-conditional-agg) instead of the fallback pool." group:"routing"`
	RetryMaxRetries    int    `help:"Attempts a request may get in all, as sglang_router counts them (0 and 1: no retry); each retry goes to a fresh prefill and decode, after one that failed before anything reached the client (unreachable worker, reset, 5xx; never a 4xx)." default:"3" group:"routing"`
	DisableRetries     bool   `help:"Give every request a single attempt." group:"routing"`

	PrefillDPPolicy   string `help:"Pick the prefill DP rank of requests that name none: off (mini_lb's behaviour), round_robin or least_inflight. pdlb then sends the rank to both workers and draws the room to match." default:"off" enum:"off,round_robin,least_inflight" group:"dp"`
	NoPrewarm         bool   `help:"Do not warm decode × prefill pairs; for decodes without SGLang's first-request bug (PR #22990)." group:"dp"`
	WarmupTimeoutSecs int    `help:"Longest one pair warm-up, and a request's wait for it, may take." default:"30" group:"dp"`

	RequestTimeoutSecs      int     `help:"Longest a generation may take, streams included." default:"1800" group:"timeouts"`
	FirstByteTimeoutSecs    int     `help:"Longest wait for a stream's first byte from the decode." default:"300" group:"timeouts"`
	StreamIdleTimeoutSecs   int     `help:"Longest silence between two stream events from the decode." default:"300" group:"timeouts"`
	ClientWriteTimeoutSecs  int     `help:"Longest a write to a client may take, so a client that stops reading is let go." default:"60" group:"timeouts"`
	ClientStallTimeoutSecs  int     `help:"Longest a stream's write to its client may wait for the client to read (its socket buffers full); then the stream ends, both workers are told to abort it, and the connection is closed, so a client that stops reading holds no decode connection. At most --client-write-timeout-secs." default:"10" group:"timeouts"`
	ClientReadTimeoutSecs   int     `help:"Longest reading a client's request may take, so a client that sends slowly is let go." default:"60" group:"timeouts"`
	ClientIdleTimeoutSecs   int     `help:"Close a client's keep-alive connection after this long without a request." default:"90" group:"timeouts"`
	ConnectTimeoutSecs      float64 `help:"Longest a new connection to a worker may take; a worker that does not accept in time counts as unreachable, and the request goes to another." default:"5" group:"timeouts"`
	PoolIdleTimeoutSecs     float64 `help:"Close pooled worker connections idle this long; keep it below the workers' 5 s keep-alive." default:"4" group:"timeouts"`
	ShutdownGracePeriodSecs int     `help:"On SIGTERM, how long in-flight requests and streams may finish before pdlb exits." default:"180" group:"timeouts"`

	DisableHealthCheck      bool   `help:"No active health checks: every worker counts as up, and a prefill whose bootstrap server cannot be reached stays selectable." group:"health"`
	HealthCheckEndpoint     string `help:"Path probed with GET on every worker." default:"/health" group:"health"`
	HealthCheckIntervalSecs int    `help:"Time between two probes of a worker." default:"5" group:"health"`
	HealthCheckTimeoutSecs  int    `help:"Longest a probe may take." default:"2" group:"health"`
	HealthSuccessThreshold  int    `help:"Consecutive good probes that bring a worker back." default:"2" group:"health"`
	HealthFailureThreshold  int    `help:"Consecutive failed probes that take a worker out." default:"3" group:"health"`
	DisableCircuitBreaker   bool   `help:"Do not eject workers whose requests keep failing." group:"health"`
	CbFailureThreshold      int    `help:"Consecutive failed requests (transport errors, timeouts, 5xx; never a 4xx) that eject a worker." default:"5" group:"health"`
	CbTimeoutDurationSecs   int    `help:"First ejection; it doubles while the worker keeps failing its trial requests." default:"1" group:"health"`
	CbMaxBackoffSecs        int    `help:"Longest ejection." default:"30" group:"health"`

	MaxConcurrentRequests int   `help:"Most generate requests in flight; beyond, they wait in a queue, then get a 429 (0 or less, as sglang_router's -1: no limit)." default:"0" group:"limits"`
	QueueSize             int   `help:"Most requests waiting for a slot under --max-concurrent-requests; 0, as in sglang_router: none wait, a 429 at once." default:"256" group:"limits"`
	QueueTimeoutSecs      int   `help:"Longest a request waits for a slot under --max-concurrent-requests." default:"60" group:"limits"`
	MaxConnections        int   `help:"Most client connections open at once. Beyond, one that has sent nothing, else the one waiting longest for its client (its next request, or the rest of one sent slowly), is closed to make room, and while every one has its request served a new one gets a 503. 0: derived from the descriptor limit (ulimit -n), less 64, 8 a worker and --max-conns-per-backend a worker, but at least a third of what the 64 and 8s leave, and at most 65536; below 0: no limit." default:"0" group:"limits"`
	MaxConnsPerBackend    int   `help:"Most pooled connections to one worker; requests beyond wait for one." default:"4096" group:"limits"`
	MaxHeaderSize         int   `help:"Largest request header accepted, in bytes; larger ones get a 431. A client connection holds a buffer this large while it reads a request." default:"4096" group:"limits"`
	MaxPayloadSize        int   `help:"Largest request body accepted, in bytes (more than 0); larger ones get a 413." default:"268435456" group:"limits"`
	MaxBodyMemory         int64 `help:"Most memory, in bytes, that bodies may hold at once: clients' bodies as they arrive, the copies sent to the workers, and the workers' answers read whole. A request that would cross it gets a 503. At least what one request of --max-payload-size needs: three times it, and a little." default:"1073741824" group:"limits"`
	MaxBatchSize          int   `help:"Most items a /generate batch may hold (a list of text or input_ids); larger ones get a 400." default:"4096" group:"limits"`
	MaxAbortsPerSecond    int   `help:"Most /abort_request calls a second pdlb sends one worker for requests it gave up on (one a request, a batch included); beyond, they are dropped and counted in pdlb_abort_requests_dropped_total, and the worker aborts those requests itself when it sees their connections closed." default:"100" group:"limits"`

	cli.LogFlags     `group:"observability"`
	AccessLog        bool     `help:"Log one line per request (refusals and control routes included), at info level whatever --log-level." group:"observability"`
	RequestIDHeaders []string `help:"Headers to take a client's request ID from, the first present wins (sglang_router's --request-id-headers); pdlb answers it, and passes it to the workers, as X-Request-Id." default:"X-Request-Id" placeholder:"NAME" sep:"," group:"observability"`
	PrometheusHost   string   `help:"Address of the extra /metrics listener enabled by --prometheus-port." default:"0.0.0.0" group:"observability"`
	PrometheusPort   int      `help:"Also serve /metrics, and the operator routes (/flush_cache, /bootstrap, abort_all) without --admin-api-key, on this port (0: only on the main port)." default:"0" type:"port-or-zero" group:"observability"`
	PprofAddr        string   `help:"Serve Go's profiles (/debug/pprof/) and /metrics on this address, e.g. 127.0.0.1:6060; off when empty. Keep it private." placeholder:"HOST:PORT" group:"observability"`

	MiniLB           bool `name:"mini-lb" help:"Accepted for mini_lb compatibility; pdlb always pairs prefill and decode. Only with it are sglang_router's TLS and authentication flags (--tls-*, --client-*, --ca-cert-paths, --control-plane-*, --jwt-*), which pdlb does not do, accepted: ignored with a warning, as mini_lb ignores them. Without --admin-api-key, it also opens the operator routes (/flush_cache, /bootstrap, /abort_request with abort_all) to every client, as mini_lb does, with a warning." group:"compat"`
	PDDisaggregation bool `name:"pd-disaggregation" help:"Accepted for mini_lb compatibility; always on." group:"compat"`
	JSONLog          bool `help:"Accepted for sglang_router compatibility (JSON is the default log format)." group:"compat"`
}

// routerOnlyPolicies are sglang_router policies pdlb does not implement; like
// mini_lb, pdlb uses random instead of failing.
var routerOnlyPolicies = []string{"cache_aware", "bucket", "consistent_hashing", "prefix_hash", "manual"}

// minHeaderSize is the smallest --max-header-size: below it, every request
// would get a 431.
const minHeaderSize = 1024

// Validate checks what kong's tags cannot.
func (c *Command) Validate() error {
	if c.RequestTimeoutSecs <= 0 {
		return errors.New("--request-timeout-secs must be positive")
	}
	for _, d := range []struct {
		flag string
		secs int
	}{
		{"--warmup-timeout-secs", c.WarmupTimeoutSecs}, {"--first-byte-timeout-secs", c.FirstByteTimeoutSecs},
		{"--stream-idle-timeout-secs", c.StreamIdleTimeoutSecs}, {"--client-write-timeout-secs", c.ClientWriteTimeoutSecs},
		{"--client-stall-timeout-secs", c.ClientStallTimeoutSecs}, {"--max-aborts-per-second", c.MaxAbortsPerSecond},
		{"--client-read-timeout-secs", c.ClientReadTimeoutSecs}, {"--max-header-size", c.MaxHeaderSize},
		{"--client-idle-timeout-secs", c.ClientIdleTimeoutSecs},
		{"--queue-timeout-secs", c.QueueTimeoutSecs}, {"--health-check-interval-secs", c.HealthCheckIntervalSecs},
		{"--health-check-timeout-secs", c.HealthCheckTimeoutSecs}, {"--health-success-threshold", c.HealthSuccessThreshold},
		{"--health-failure-threshold", c.HealthFailureThreshold}, {"--cb-failure-threshold", c.CbFailureThreshold},
		{"--cb-timeout-duration-secs", c.CbTimeoutDurationSecs}, {"--cb-max-backoff-secs", c.CbMaxBackoffSecs},
		// 0 is not "no limit": fasthttp reads it as its 4 MiB default,
		// lb.Config as 64 MiB (what --max-payload-size 0 silently was), and
		// a body is held whole in memory, so there is always a limit.
		{"--max-payload-size", c.MaxPayloadSize}, {"--max-batch-size", c.MaxBatchSize},
	} {
		if d.secs <= 0 {
			return fmt.Errorf("%s must be positive", d.flag)
		}
	}
	if c.MaxHeaderSize < minHeaderSize {
		return fmt.Errorf("--max-header-size %d is too small: a request's header needs %d bytes at least", c.MaxHeaderSize, minHeaderSize)
	}
	if !strings.HasPrefix(c.HealthCheckEndpoint, "/") {
		return fmt.Errorf("--health-check-endpoint must be a path starting with /, got %q", c.HealthCheckEndpoint)
	}
	if c.MaxBodyMemory <= 0 {
		return errors.New("--max-body-memory must be positive")
	}
	if c.RetryMaxRetries < 0 || c.QueueSize < 0 {
		return errors.New("--retry-max-retries and --queue-size cannot be negative")
	}
	if err := c.checkListenAddrs(); err != nil {
		return err
	}
	if c.PDMinPromptTokens < 0 {
		return errors.New("--pd-min-prompt-tokens cannot be negative")
	}
	for _, p := range []string{c.Policy, c.PrefillPolicy, c.DecodePolicy, c.FallbackPolicy} {
		if p != "" && !isPolicy(p) && !isRouterOnlyPolicy(p) {
			return fmt.Errorf("unknown policy %q; want one of %s", p, strings.Join(lb.Policies, ", "))
		}
	}
	return nil
}

// checkListenAddrs refuses the listen addresses that cannot be listened
// on whatever the machine: found when pdlb starts, they were failures at
// run time (status 1) rather than usage errors.
func (c *Command) checkListenAddrs() error {
	if err := checkHost("--host", c.Host, "--port"); err != nil {
		return err
	}
	if err := checkHost("--prometheus-host", c.PrometheusHost, "--prometheus-port"); err != nil {
		return err
	}
	if c.PprofAddr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.PprofAddr)
	if err != nil {
		return fmt.Errorf("--pprof-addr %q is not HOST:PORT, such as 127.0.0.1:6060: %w", c.PprofAddr, err)
	}
	if _, ok := cli.ParsePort(port); !ok {
		return fmt.Errorf("--pprof-addr %q: %q is not a port from 1 to 65535", c.PprofAddr, port)
	}
	if strings.ContainsAny(host, "[]") {
		return fmt.Errorf("--pprof-addr %q is not HOST:PORT, such as 127.0.0.1:6060 or [::1]:6060", c.PprofAddr)
	}
	return nil
}

// checkHost refuses a host flag's value that holds a port, or brackets, as
// "0.0.0.0:9000" or "[::]" do: pdlb joins it to portFlag's port, and could
// listen on neither. A colon belongs to an IPv6 address only.
func checkHost(flag, host, portFlag string) error {
	if strings.ContainsAny(host, "[]") {
		return fmt.Errorf("%s %q is not a host: write an IPv6 address without brackets", flag, host)
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%s %q is not a host: give the port with %s", flag, host, portFlag)
		}
	}
	return nil
}

// config converts the flags into an lb.Config, with warnings for what pdlb
// accepted but does not do.
func (c *Command) config() (lb.Config, []string) {
	var warnings []string
	policy := func(flag, p string) string {
		if isRouterOnlyPolicy(p) {
			warnings = append(warnings, fmt.Sprintf("%s %s is not implemented by pdlb; using random", flag, p))
			return lb.PolicyRandom
		}
		return p
	}
	base := policy("--policy", c.Policy)
	// sglang_router's retry_max_retries counts every attempt, the first
	// included (retry.rs: max(1), is_last = attempt+1 >= max); lb counts
	// the ones after it.
	attempts := max(c.RetryMaxRetries, 1)
	cfg := lb.Config{
		Prefill:               c.Prefill,
		Decode:                cli.ListItems(c.Decode),
		Fallback:              cli.ListItems(c.Fallback),
		APIKey:                c.APIKey,
		AdminAPIKey:           c.AdminAPIKey,
		OpenOperatorRoutes:    c.MiniLB,
		RequestIDHeaders:      cli.ListItems(c.RequestIDHeaders),
		PrefillPolicy:         base,
		DecodePolicy:          base,
		FallbackPolicy:        base,
		PDMinPromptTokens:     c.PDMinPromptTokens,
		FirstByteTimeout:      time.Duration(c.FirstByteTimeoutSecs) * time.Second,
		StreamIdleTimeout:     time.Duration(c.StreamIdleTimeoutSecs) * time.Second,
		ClientWriteTimeout:    time.Duration(c.ClientWriteTimeoutSecs) * time.Second,
		ClientStallTimeout:    time.Duration(c.ClientStallTimeoutSecs) * time.Second,
		ClientReadTimeout:     time.Duration(c.ClientReadTimeoutSecs) * time.Second,
		ClientIdleTimeout:     time.Duration(c.ClientIdleTimeoutSecs) * time.Second,
		MaxConnections:        c.MaxConnections,
		MaxHeaderSize:         c.MaxHeaderSize,
		MaxRetries:            attempts - 1,
		DisableRetries:        c.DisableRetries || attempts == 1,
		MaxConcurrentRequests: max(c.MaxConcurrentRequests, 0),
		QueueSize:             cmp.Or(c.QueueSize, -1), // lb's zero is its default
		QueueTimeout:          time.Duration(c.QueueTimeoutSecs) * time.Second,
		HealthCheck: lb.HealthCheckConfig{
			Disable:  c.DisableHealthCheck,
			Path:     c.HealthCheckEndpoint,
			Interval: time.Duration(c.HealthCheckIntervalSecs) * time.Second,
			Timeout:  time.Duration(c.HealthCheckTimeoutSecs) * time.Second,
			Rise:     c.HealthSuccessThreshold,
			Fall:     c.HealthFailureThreshold,
		},
		Breaker: lb.BreakerConfig{
			Disable:    c.DisableCircuitBreaker,
			Threshold:  c.CbFailureThreshold,
			MinBackoff: time.Duration(c.CbTimeoutDurationSecs) * time.Second,
			MaxBackoff: time.Duration(c.CbMaxBackoffSecs) * time.Second,
		},
		DecodeLocalPrefill: c.DecodeLocalPrefill,
		RequestTimeout:     time.Duration(c.RequestTimeoutSecs) * time.Second,
		MaxRequestBodySize: c.MaxPayloadSize,
		MaxBodyMemory:      c.MaxBodyMemory,
		MaxBatchSize:       c.MaxBatchSize,
		IdleConnTimeout:    time.Duration(c.PoolIdleTimeoutSecs * float64(time.Second)),
		ConnectTimeout:     time.Duration(c.ConnectTimeoutSecs * float64(time.Second)),
		MaxConnsPerBackend: c.MaxConnsPerBackend,
		MaxAbortsPerSecond: c.MaxAbortsPerSecond,
		AccessLog:          c.AccessLog,
		PrefillDPPolicy:    c.PrefillDPPolicy,
		NoPrewarm:          c.NoPrewarm,
		WarmupTimeout:      time.Duration(c.WarmupTimeoutSecs) * time.Second,
	}
	if c.PDMinPromptTokens > 0 && len(cfg.Fallback) == 0 {
		which := "prompts"
		if c.DecodeLocalPrefill {
			which = "prompts on the OpenAI routes (which --decode-local-prefill does not cover)"
		}
		warnings = append(warnings, fmt.Sprintf("--pd-min-prompt-tokens %d without --fallback: %s estimated shorter get a 503, having nowhere to go", c.PDMinPromptTokens, which))
	}
	if c.PrefillPolicy != "" {
		cfg.PrefillPolicy = policy("--prefill-policy", c.PrefillPolicy)
	}
	if c.DecodePolicy != "" {
		cfg.DecodePolicy = policy("--decode-policy", c.DecodePolicy)
	}
	if c.FallbackPolicy != "" {
		cfg.FallbackPolicy = policy("--fallback-policy", c.FallbackPolicy)
	}
	if w := c.openAdminWarning(); w != "" {
		warnings = append(warnings, w)
	}
	return cfg, warnings
}

// openAdminWarning is the warning of an admin listener that serves the
// operator routes, with no admin key, on an address other clients may
// reach: --prometheus-host's default is 0.0.0.0, where metrics scrapers
// come from.
func (c *Command) openAdminWarning() string {
	if c.AdminAPIKey != "" || c.MiniLB { // keyed, or open everywhere (openRoutesWarning)
		return ""
	}
	var open []string
	if c.PrometheusPort > 0 && !isLoopbackHost(c.PrometheusHost) {
		open = append(open, "--prometheus-port's on "+c.PrometheusHost)
	}
	if host, _, err := net.SplitHostPort(c.PprofAddr); err == nil && !isLoopbackHost(host) {
		open = append(open, "--pprof-addr's on "+c.PprofAddr)
	}
	if len(open) == 0 {
		return ""
	}
	return "the operator routes (/flush_cache, /bootstrap, /abort_request with abort_all) answer without a key on the admin listener " +
		strings.Join(open, " and ") + ", to anyone who reaches it: set --admin-api-key, or bind it to 127.0.0.1"
}

// isLoopbackHost reports whether host, a listen address's host, takes
// connections from this machine only.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Run serves until SIGINT or SIGTERM, then drains for the grace period. A
// drain that cut requests ends the process through exit, with status 1.
func (c *Command) Run(ignored IgnoredFlags, exit cli.Exit, version cli.Version) error {
	log := c.Logger(os.Stderr)
	cfg, warnings := c.config()
	for _, f := range ignored {
		log.Warn().Str("flag", f).Msg(ignoredWarning(f))
	}
	if w := c.openRoutesWarning(); w != "" {
		log.Warn().Msg(w)
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}
	applyProcessSettings(cfg.MaxBodyMemory)
	srv, err := lb.New(cfg, log)
	if err != nil {
		return cli.UsageError{Err: err} // the configuration is all New can refuse
	}
	ln, err := cli.Listen(net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	if c.PrometheusPort > 0 {
		if err := serveAdmin(srv, net.JoinHostPort(c.PrometheusHost, strconv.Itoa(c.PrometheusPort)), false, log); err != nil {
			return fmt.Errorf("cannot listen for --prometheus-port: %w", err)
		}
	}
	if c.PprofAddr != "" {
		if err := serveAdmin(srv, c.PprofAddr, true, log); err != nil {
			return fmt.Errorf("cannot listen for --pprof-addr: %w", err)
		}
	}
	log.Info().Str("version", string(version)).Msg("pdlb starting")
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	status, err := serveUntilSignal(srv, ln, time.Duration(c.ShutdownGracePeriodSecs)*time.Second, sigs, log)
	if err != nil {
		return err
	}
	if status != 0 {
		exit(status) // serveUntilSignal has logged why
	}
	return nil
}

// defaultGCPercent is pdlb's garbage collection target unless GOGC sets one.
// pdlb's live heap is small next to its goroutine stacks, and Go's GOGC=100
// lets the heap grow by the heap and the stacks together before collecting:
// at 1,024 streams pdlb's RSS went from 64 MiB to 74 MiB within a minute and
// was still growing, and stacks grown by the first burst are only shrunk
// when a collection comes. At 50 the same minute ended at 67 MiB, and the
// extra collections did not show in the non-stream throughput (README,
// Performance).
const defaultGCPercent = 50

// applyProcessSettings applies what pdlb sets for the whole process: the
// garbage collection target and memory limit (for bodies of at most
// bodyMemory bytes at once), and # HELP and # TYPE lines on /metrics, which
// the metrics library keeps in a global: without them Prometheus takes
// every series for untyped.
func applyProcessSettings(bodyMemory int64) {
	applyGCPercent()
	applyMemoryLimit(bodyMemory)
	metrics.ExposeMetadata(true)
}

// memoryOverhead is what pdlb's memory limit allows beyond its body memory:
// the runtime, connections, streams (4,096 streams take about 250 MiB).
const memoryOverhead = 512 << 20

// applyMemoryLimit sets the runtime's soft memory limit to the body memory
// and memoryOverhead, unless the GOMEMLIMIT environment variable chose one.
// The body memory bounds the bodies held, not the garbage of those let go:
// a burst of large answers, each grown by doubling, left pdlb at 1.75 GB
// with 1 GiB of body memory before its next collection. Near the limit, the
// collector runs sooner.
func applyMemoryLimit(bodyMemory int64) {
	if os.Getenv("GOMEMLIMIT") == "" { // as the runtime reads it
		debug.SetMemoryLimit(bodyMemory + memoryOverhead)
	}
}

// applyGCPercent sets defaultGCPercent unless the GOGC environment variable
// chose a target, which the Go runtime has applied already.
func applyGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// serveAdmin serves the admin routes (/metrics, and profiles with pprof) on
// addr in the background.
func serveAdmin(srv *lb.Server, addr string, pprof bool, log zerolog.Logger) error {
	ln, err := cli.Listen(addr)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.ServeAdmin(ln, pprof); err != nil {
			log.Error().Err(err).Str("addr", addr).Msg("an admin listener stopped")
		}
	}()
	return nil
}

// serveUntilSignal serves until the first of sigs, then drains for grace.
// Another signal during the drain ends it at once: an operator's second
// Ctrl-C or TERM means now (but see cli.SameSignalWindow). It returns the exit
// status: 0 when every request finished, 1 when some were cut, at the grace
// period's end or by the second signal.
func serveUntilSignal(srv *lb.Server, ln net.Listener, grace time.Duration, sigs <-chan os.Signal, log zerolog.Logger) (int, error) {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var sig os.Signal
	select {
	case err := <-served:
		return 0, err
	case sig = <-sigs:
	}
	first := time.Now()
	log.Info().Str("signal", sig.String()).Dur("grace", grace).
		Msg("shutting down: draining requests in flight; a second signal exits at once")
	drain, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(drain) }()
	for {
		select {
		case err := <-shut:
			var cut *lb.CutError
			switch {
			case errors.As(err, &cut):
				log.Warn().Int("cut", cut.Requests).Msg("stopped, with requests cut at the end of the grace period")
				return 1, nil
			case err != nil:
				log.Warn().Err(err).Msg("stopped")
				return 1, nil
			}
			log.Info().Msg("stopped")
			return 0, nil
		case sig = <-sigs:
			if time.Since(first) < cli.SameSignalWindow {
				continue // the first signal, delivered twice
			}
			log.Warn().Str("signal", sig.String()).Msg("exiting at once: a second signal during the drain")
			return 1, nil
		}
	}
}

func isPolicy(p string) bool { return contains(lb.Policies, p) }

func isRouterOnlyPolicy(p string) bool { return contains(routerOnlyPolicies, p) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// prefillFlags collects --prefill URL [PORT]. As in mini_lb's argparse
// (nargs="+"), the port token is optional, so the type reads kong's scanner
// itself: it takes the next token too when that is a port or "none".
// From the environment, PDLB_PREFILL holds "URL [PORT]" entries separated by
// commas.
type prefillFlags []lb.PrefillSpec

func (p *prefillFlags) Decode(ctx *kong.DecodeContext) error {
	tok, err := ctx.Scan.PopValue("prefill URL")
	if err != nil {
		return err
	}
	raw := fmt.Sprint(tok.Value)
	if strings.ContainsAny(raw, ", ") {
		return p.decodeList(raw)
	}
	spec := lb.PrefillSpec{URL: raw}
	if next := ctx.Scan.Peek(); isBootstrapPortToken(next) {
		ctx.Scan.Pop()
		port, err := parseBootstrapPort(raw, fmt.Sprint(next.Value))
		if err != nil {
			return err
		}
		spec.BootstrapPort = port
	}
	*p = append(*p, spec)
	return nil
}

// isBootstrapPortToken reports whether tok, the one after a prefill URL,
// is its bootstrap port: anything but a flag. Serve takes no positional
// arguments, so a token that is not a flag can only be the port, and a bad
// one is a bad port. A hyphen and a digit is a negative number, as
// argparse reads it, not a short flag.
func isBootstrapPortToken(tok kong.Token) bool {
	if tok.IsValue() {
		return true
	}
	s, ok := tok.Value.(string)
	return ok && tok.Type == kong.UntypedToken && len(s) > 1 && s[0] == '-' && s[1] >= '0' && s[1] <= '9'
}

func (p *prefillFlags) decodeList(list string) error {
	for _, entry := range strings.Split(list, ",") {
		fields := strings.Fields(entry)
		switch len(fields) {
		case 0:
			continue
		case 1:
			*p = append(*p, lb.PrefillSpec{URL: fields[0]})
		case 2:
			port, err := parseBootstrapPort(fields[0], fields[1])
			if err != nil {
				return err
			}
			*p = append(*p, lb.PrefillSpec{URL: fields[0], BootstrapPort: port})
		default:
			return fmt.Errorf("invalid prefill %q: want URL [PORT|none]", entry)
		}
	}
	return nil
}

// parseBootstrapPort reads the token after the prefill URL url: a port, or
// "none" (port 0). The error names both, as sglang_router's
// _parse_prefill_urls does ("Invalid bootstrap port: abc. Must be a number
// or 'none'").
func parseBootstrapPort(url, s string) (int, error) {
	if strings.EqualFold(s, "none") {
		return 0, nil
	}
	if n, ok := cli.ParsePort(s); ok {
		return n, nil
	}
	return 0, fmt.Errorf("invalid bootstrap port %q for prefill %s: expected %s, or none", s, url, cli.WantPort)
}
