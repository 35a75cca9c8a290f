package serve

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// Command is `pdlb serve`, pdlb's default command: it runs the load
// balancer. Flag names follow sglang_router's, so a
// mini_lb command line works unchanged.
type Command struct {
	Prefill   prefillFlags `help:"A prefill worker URL, optionally followed by its bootstrap port or 'none'; repeat for more. Without a port pdlb asks the worker's /server_info, and sends null until it knows." placeholder:"URL [PORT]" group:"workers"`
	Decode    []string     `help:"A decode worker URL; repeat for more (or list them with commas)." placeholder:"URL" sep:"," group:"workers"`
	Fallback  []string     `help:"An aggregated (non-PD) SGLang worker for decode-only traffic, which gets the client's body unchanged; repeat for more (or list them with commas)." placeholder:"URL" sep:"," group:"workers"`
	dnsFlags  `embed:""`
	kubeFlags `embed:""`

	Host        string `help:"Address to listen on." default:"0.0.0.0" group:"listen"`
	Port        int    `help:"Port to listen on." default:"30000" type:"port" group:"listen"`
	APIKey      string `help:"sglang_router's --api-key: sent to the workers as 'Authorization: Bearer KEY' on every call, and required of clients on the generate routes, /flush_cache and /abort_request." placeholder:"KEY" group:"listen"`
	AdminAPIKey string `help:"Key required, as 'Authorization: Bearer KEY', on the operator routes (/workers, /flush_cache, /bootstrap, /abort_request but by one rid), on every listener; it opens the --api-key routes too. Without it they answer only on the --prometheus-port and --pprof-addr listeners and to loopback clients (a 403 elsewhere), unless --mini-lb." placeholder:"KEY" group:"listen"`

	Policy                  string  `help:"How to pick a worker in each pool: random (mini_lb's), round_robin, power_of_two (the less loaded of two random picks), least_load, cache_aware (follows what each worker has cached, as sglang_router's), prefix_hash (the same prompt prefix to the same worker, from every pdlb replica), consistent_hashing or manual (by the X-SMG-Routing-Key header). sglang_router's bucket falls back to random with a warning." default:"random" group:"routing"`
	PrefillPolicy           string  `help:"Policy for the prefill pool (default: --policy)." group:"routing"`
	DecodePolicy            string  `help:"Policy for the decode pool (default: --policy)." group:"routing"`
	FallbackPolicy          string  `help:"Policy for the fallback pool (default: --policy)." group:"routing"`
	CacheThreshold          float64 `help:"cache_aware: the share of a prompt (0 to 1) the best match must exceed to win." default:"0.3" group:"routing"`
	BalanceAbsThreshold     int     `help:"cache_aware: the pool is imbalanced, and the least loaded worker wins, when its busiest and idlest workers differ by more than this many requests in flight..." default:"64" group:"routing"`
	BalanceRelThreshold     float64 `help:"...and the busiest has more than this many times the idlest's." default:"1.5" group:"routing"`
	MaxTreeSize             int     `help:"cache_aware: the prompt bytes remembered per worker, kept to by the eviction." default:"67108864" group:"routing"`
	EvictionIntervalSecs    int     `help:"cache_aware: how often the trees are evicted down to --max-tree-size." default:"60" group:"routing"`
	PrefixTokenCount        int     `help:"prefix_hash: the prompt's first tokens (4 bytes of text a token) hashed." default:"256" group:"routing"`
	MaxIdleSecs             int     `help:"manual: seconds a routing key unused keeps its worker." default:"14400" group:"routing"`
	AssignmentMode          string  `help:"manual: how a new routing key gets its worker: random, min_load (fewest requests in flight) or min_group (fewest keys)." default:"random" enum:"random,min_load,min_group" group:"routing"`
	WorkerLoadCheckInterval int     `help:"Seconds between two reads of the workers' loads (GET /v1/loads), for power_of_two, least_load and --prefill-dp-policy least_inflight." default:"1" group:"routing"`
	PDMinPromptTokens       int     `help:"Send prompts shorter than this many tokens (estimated: input_ids, or 4 bytes of text a token) decode-only, where a remote prefill costs more than it saves; 0 sends every prompt PD." default:"0" group:"routing"`
	DecodeLocalPrefill      bool    `help:"Send decode-only /generate traffic to a decode with do_local_prefill (SGLang PR #34773, decode flag --disaggregation-decode-enable-conditional-agg) instead of the fallback pool." group:"routing"`
	RetryMaxRetries         int     `help:"Attempts a request may get in all, as sglang_router counts them (0 and 1: no retry); each retry goes to a fresh prefill and decode, after one that failed before anything reached the client (unreachable worker, reset, 5xx; never a 4xx)." default:"3" group:"routing"`
	DisableRetries          bool    `help:"Give every request a single attempt." group:"routing"`

	PrefillDPPolicy   string `help:"Pick the prefill DP rank of requests that name none: off (mini_lb's behaviour), round_robin or least_inflight. pdlb then sends the rank to both workers and draws the room to match." default:"off" enum:"${dp_policies}" group:"dp"`
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
	DrainTimeoutSecs        int     `help:"How long the requests and streams in flight on a worker removed at run time (gone from DNS) may finish before its connections close; 0: --shutdown-grace-period-secs." default:"0" group:"timeouts"`

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
	PrometheusPort   int      `help:"Also serve /metrics, /liveness, /readiness, and the operator routes (/workers, /flush_cache, /bootstrap, abort_all) without --admin-api-key, on this port (0: only on the main port)." default:"0" type:"port-or-zero" group:"observability"`
	PprofAddr        string   `help:"Serve Go's profiles (/debug/pprof/) and /metrics on this address, e.g. 127.0.0.1:6060; off when empty. Keep it private." placeholder:"HOST:PORT" group:"observability"`

	MiniLB           bool `name:"mini-lb" help:"Accepted for mini_lb compatibility; pdlb always pairs prefill and decode. Only with it are sglang_router's TLS and authentication flags (--tls-*, --client-*, --ca-cert-paths, --control-plane-*, --jwt-*), which pdlb does not do, accepted: ignored with a warning, as mini_lb ignores them. Without --admin-api-key, it also opens the operator routes (/flush_cache, /bootstrap, /abort_request with abort_all) to every client, as mini_lb does, with a warning." group:"compat"`
	PDDisaggregation bool `name:"pd-disaggregation" help:"Accepted for mini_lb compatibility; always on." group:"compat"`
	JSONLog          bool `help:"Accepted for sglang_router compatibility (JSON is the default log format)." group:"compat"`
}

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
		{"--max-tree-size", c.MaxTreeSize}, {"--eviction-interval-secs", c.EvictionIntervalSecs},
		{"--prefix-token-count", c.PrefixTokenCount}, {"--worker-load-check-interval", c.WorkerLoadCheckInterval},
		{"--max-idle-secs", c.MaxIdleSecs},
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
	if c.DrainTimeoutSecs < 0 || c.ShutdownGracePeriodSecs < 0 {
		return errors.New("--drain-timeout-secs and --shutdown-grace-period-secs cannot be negative")
	}
	if err := c.dnsFlags.validate(); err != nil {
		return err
	}
	if err := c.kubeFlags.validate(); err != nil {
		return err
	}
	return c.checkRouting()
}

// checkRouting refuses the policies pdlb does not know (sglang_router's it
// does not implement pass, see config) and cache_aware's thresholds out of
// their range.
func (c *Command) checkRouting() error {
	if c.CacheThreshold < 0 || c.CacheThreshold > 1 {
		return errors.New("--cache-threshold must be between 0 and 1")
	}
	if c.BalanceAbsThreshold < 0 || c.BalanceRelThreshold < 0 {
		return errors.New("--balance-abs-threshold and --balance-rel-threshold cannot be negative")
	}
	for _, p := range []string{c.Policy, c.PrefillPolicy, c.DecodePolicy, c.FallbackPolicy} {
		if p == "" || isRouterOnlyPolicy(p) {
			continue
		}
		if err := lb.CheckPolicy(p); err != nil {
			return err
		}
	}
	return nil
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
	if err := c.connectKubernetes(&cfg.Kubernetes, log); err != nil {
		return err
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
