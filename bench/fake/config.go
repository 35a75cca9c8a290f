package fake

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Role is the part a fake server plays in PD disaggregation.
type Role string

// The roles a Server can play. They match SGLang's --disaggregation-mode,
// with RoleAggregated standing for a server without disaggregation.
const (
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
	RoleAggregated Role = "aggregated"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultModel         = "fake-model"
	DefaultTokens        = 16
	DefaultBootstrapPort = 8998
	DefaultKVTimeout     = 30 * time.Second
	DefaultIdleTimeout   = 5 * time.Second
	// DefaultHeartbeatInterval and DefaultHeartbeatMaxFailures are SGLang's
	// SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL and
	// SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE defaults.
	DefaultHeartbeatInterval    = 5 * time.Second
	DefaultHeartbeatMaxFailures = 2
	// DefaultInfoRetries and DefaultInfoRetryInterval are the decode's
	// _max_ensure_retries and _ensure_retry_interval: how often, and how
	// far apart, it asks a bootstrap server for parallel info it lacks
	// (disaggregation/decode.py).
	DefaultInfoRetries       = 15
	DefaultInfoRetryInterval = time.Second
	// DefaultMaxHeaderSize is h11's limit on a request header, which
	// SGLang's uvicorn keeps.
	DefaultMaxHeaderSize = 16 << 10
	// DefaultPageSize is SGLang's --page-size when the attention backend
	// asks for no other: one token per page (server_args.py).
	DefaultPageSize = 1
)

// Config configures a fake Server. The zero value is a usable aggregated
// server; every field documents its zero-value default. New copies the
// Config, so changing it afterwards has no effect.
type Config struct {
	// Role is the part the server plays. Zero means RoleAggregated. New
	// panics on any other value than the Role constants.
	Role Role

	// Model is the model name reported by /v1/models, /model_info and
	// answers that name no model. Zero means DefaultModel.
	Model string

	// APIKey, if set, is required as "Authorization: Bearer <key>" on every
	// request but OPTIONS, /health* and /metrics, as SGLang's --api-key:
	// others get 401 {"error": "Unauthorized"}.
	APIKey string

	// Tokens is how many tokens a decode or aggregated server generates when
	// the request sets no max_new_tokens (/generate sampling_params),
	// max_tokens or max_completion_tokens (OpenAI routes); a request's own
	// value wins. Zero means DefaultTokens.
	Tokens int

	// TokenDelay is the time between two generated tokens, and so between
	// two stream events. Zero means no delay.
	TokenDelay time.Duration

	// TokenGate, if not nil, replaces TokenDelay: every token step (one
	// token of each item still generating) first receives one value from
	// it. Tests use it to release stream events one at a time. Nil means
	// TokenDelay applies.
	TokenGate <-chan struct{}

	// PrefillDelay is how long a prefill or aggregated server, or a decode
	// prefilling locally (ConditionalAgg), "computes" a prompt before its KV
	// cache is ready. Zero means no delay.
	PrefillDelay time.Duration

	// The performance model (model.go), off by default: with every field
	// below at zero a server answers as it always has, with no cache, no
	// bound on concurrency and cached_tokens 0.

	// PrefillTokenDelay is what a prefill (or an aggregated server, or a
	// decode prefilling locally) spends per uncached prompt token, on top of
	// PrefillDelay: a prompt costs PrefillDelay + uncached tokens ×
	// PrefillTokenDelay. Zero means uncached tokens cost nothing.
	PrefillTokenDelay time.Duration

	// MaxPrefills bounds, per DP rank, the prompts a prefill or aggregated
	// server computes at once; the others queue, first come first served,
	// and count as waiting in its load. Zero means no bound.
	MaxPrefills int

	// CacheTokens is, per DP rank, the capacity in tokens of the prefix
	// cache of a prefill or aggregated server (cache.go): a prompt's
	// leading blocks found there are cached_tokens, and cost no
	// PrefillTokenDelay. Capacity rounds down to whole pages. Zero means no
	// cache: every answer reports cached_tokens 0. A decode ignores it.
	CacheTokens int

	// PageSize is the number of tokens of a cache block, SGLang's
	// --page-size. Zero means DefaultPageSize.
	PageSize int

	// BatchTokenDelay is what each other item generating on the same DP
	// rank adds to a decode's (or an aggregated server's) time per token: a
	// token step takes TokenDelay + (batch - 1) × BatchTokenDelay, batch
	// being the items generating there at that step. Zero means the batch
	// costs nothing. TokenGate, when set, overrides both.
	BatchTokenDelay time.Duration

	// MaxTotalTokens bounds, per DP rank, the KV tokens a decode or
	// aggregated server holds: an item takes its prompt plus its max tokens
	// from arrival (a decode preallocates before the KV transfer, as
	// SGLang's prealloc queue does) to its end; items that do not fit wait,
	// first come first served, and count as waiting in its load. An item
	// larger than the whole pool is let in alone. It is also the
	// max_total_num_tokens loads report (CacheTokens when zero). Zero means
	// no bound.
	MaxTotalTokens int

	// CacheReport is SGLang's --enable-cache-report: the OpenAI routes'
	// usage carries prompt_tokens_details {"cached_tokens": N} when N, the
	// cached tokens of the first sample of every prompt, is above 0 (SGLang's
	// UsageProcessor); otherwise prompt_tokens_details is null, as SGLang's
	// is without the flag. /generate's meta_info.cached_tokens does not
	// depend on it.
	CacheReport bool

	// StartDelay is how long after Start /health and /health_generate
	// answer 503, as SGLang's do while its server status is Starting (the
	// warmup after the HTTP server is up). Generate requests are served
	// meanwhile, as SGLang's generate routes do not look at that status
	// (http_server.py, tokenizer_manager.py); the phase before SGLang
	// listens at all, while it loads the model, is FaultRefuse. Zero means
	// healthy at once.
	StartDelay time.Duration

	// BootstrapPort is, on a prefill, the port its bootstrap server listens
	// on (on the host of its API address) and reports; on a decode, the
	// port it substitutes when a request's bootstrap_port is null, as SGLang
	// does. Zero means DefaultBootstrapPort.
	BootstrapPort int

	// BootstrapAddr, if set, is the host:port the prefill's bootstrap server
	// listens on instead of host(addr):BootstrapPort. Port 0 on a TCP
	// Network picks a free port, which is then reported. Empty means the
	// default.
	BootstrapAddr string

	// DPSize is the number of data-parallel ranks, as SGLang's --dp with
	// --enable-dp-attention: reported by /server_info and the bootstrap
	// server, and dispatched to (dp.go). Each rank has its own prefill info
	// cache on a decode, and meta_info.dp_rank reports the rank of an item.
	// Zero means 1.
	DPSize int

	// FirstRequestBug makes a decode reproduce SGLang between 2026-03-18 and
	// PR #22990 (see package bootstrap's documentation): a request carrying
	// disagg_prefill_dp_rank fails on a decode DP rank that has not cached
	// the prefill's parallel info, and does not fill that cache; only a
	// request without the field, on the same rank, does. False means the
	// fixed behaviour. Other roles ignore it.
	FirstRequestBug bool

	// ConditionalAgg is a decode's
	// --disaggregation-decode-enable-conditional-agg (SGLang PR #34773, an
	// open draft): a /generate item marked
	// "do_local_prefill": true is prefilled by the decode itself, taking
	// PrefillDelay, and answered as an aggregated server answers, with no KV
	// transfer (local.go). False means the field is ignored, as by a server
	// without the feature. Other roles ignore it.
	ConditionalAgg bool

	// RegisterDelay is how long after Start the bootstrap server answers 503
	// "Prefill server not fully registered yet (N workers registered)" (or
	// nulls on the old API); the DP ranks register one by one over it, so
	// N grows. Zero means registered at once.
	RegisterDelay time.Duration

	// OldBootstrapAPI makes the bootstrap server answer the /route API of
	// SGLang before 2026-02-23 (engine_rank, target_dp_group) instead of the
	// current one. False means the current API.
	OldBootstrapAPI bool

	// KVTimeout bounds how long either side of a KV transfer waits for the
	// other: the decode from the request's arrival (prefill info fetch
	// included), the prefill from the end of its PrefillDelay. Zero means
	// DefaultKVTimeout.
	KVTimeout time.Duration

	// HeartbeatInterval is, on a decode, the time between two rounds of
	// health polls (GET /health) of the bootstrap servers of the prefills
	// whose parallel info a DP rank caches (heartbeat.go), SGLang's
	// SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL. SGLang raises values below
	// 2 s to 2 s; the fake takes any, so tests can be quick. Zero means
	// DefaultHeartbeatInterval. Other roles ignore it.
	HeartbeatInterval time.Duration

	// HeartbeatMaxFailures is, on a decode, how many health polls of a
	// prefill's bootstrap server must fail in a row before a DP rank drops
	// that prefill's cached parallel info and fails the items waiting on
	// it (heartbeat.go), SGLang's SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE.
	// Zero means DefaultHeartbeatMaxFailures. Other roles ignore it.
	HeartbeatMaxFailures int

	// InfoRetries and InfoRetryInterval are, on a decode, how many times a
	// request asks a bootstrap server for the prefill's parallel info
	// before it fails, and the pause between two asks (while the request's
	// KVTimeout lasts). Zero means DefaultInfoRetries and
	// DefaultInfoRetryInterval, SGLang's. Other roles ignore them.
	InfoRetries       int
	InfoRetryInterval time.Duration

	// IdleTimeout is how long the HTTP API keeps an idle keep-alive
	// connection; SGLang's uvicorn drops them after about 5 s (its
	// timeout_keep_alive), and Server.CloseIdleConnections drops them at
	// once. Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration

	// MaxHeaderSize is the largest request header the HTTP API reads;
	// larger ones get a 431. Zero means DefaultMaxHeaderSize.
	MaxHeaderSize int

	// StatsRoute serves GET StatsPath (/fake/stats): the Stats snapshot as
	// JSON, for a test that runs the fake in another process (`pdlb fake
	// --stats-route`). SGLang has no such route: false means it answers 404
	// as any unknown route does.
	StatsRoute bool

	// Canary, if not empty, is a string whose presence in a request to the
	// HTTP API, in a header's name or value (in any case) or in the body
	// (byte for byte), counts the request in Stats.Canaries. A test plants
	// it where a load balancer must not pass it on (a trailer, a second
	// X-Request-Id, a client's bootstrap_host) and learns whether it reached
	// the worker. Empty means nothing is looked for.
	Canary string

	// Network is how a decode reaches bootstrap servers. Nil means the
	// Network given to Start; a decode used only through Handler and with
	// no Network fails every KV transfer.
	Network *Network

	// OnRequest, if not nil, is called at the start of every HTTP API
	// request with its path and body. body is valid only during the call.
	// It runs on the request's goroutine, concurrently with other requests.
	OnRequest func(path string, body []byte)

	// OnFault, if not nil, is called each time a fault (Server.SetFault)
	// acts on a request, as it counts in Stats.FaultsInjected: FaultError
	// as it answers, FaultHang and FaultStall as they start holding the
	// request, FaultCut as it cuts. It runs on the request's goroutine,
	// concurrently with other requests, so a test learns without sleeping
	// that a request is held.
	OnFault func(kind FaultKind)

	// OnClientGone, if not nil, is called when a generate request ends
	// because its client closed the connection, as it counts in
	// Stats.ClientGone: the request has left InFlight and its KV wait has
	// ended. rid is the request's id (its first item's), "" for a request
	// held by FaultHang, which was never parsed. It runs on the request's
	// goroutine, concurrently with other requests.
	OnClientGone func(rid string)

	// ClientWatchDelay is how long a generate request runs before the server
	// starts watching its client for going away (a background read, and
	// its goroutine). SGLang notices a client gone within seconds. Zero
	// means at once, which tests want; `pdlb fake` waits 1 s, so the short
	// requests of a benchmark never pay for the watch.
	ClientWatchDelay time.Duration

	// Now is the clock behind StartDelay and RegisterDelay, so tests can
	// move time without sleeping. KV timeouts and delays use real timers.
	// Nil means time.Now.
	Now func() time.Time

	// Log receives the server's logs. The zero value discards them.
	Log zerolog.Logger
}

// withDefaults returns c with every zero field set to its default, or
// panics on an unknown Role: a Config is built by code, so a bad role is a
// programming error.
func (c Config) withDefaults() Config {
	switch c.Role {
	case "":
		c.Role = RoleAggregated
	case RolePrefill, RoleDecode, RoleAggregated:
	default:
		panic(fmt.Sprintf("fake: unknown role %q", c.Role))
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Tokens == 0 {
		c.Tokens = DefaultTokens
	}
	if c.BootstrapPort == 0 {
		c.BootstrapPort = DefaultBootstrapPort
	}
	if c.DPSize <= 0 {
		c.DPSize = 1
	}
	if c.KVTimeout <= 0 {
		c.KVTimeout = DefaultKVTimeout
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatMaxFailures <= 0 {
		c.HeartbeatMaxFailures = DefaultHeartbeatMaxFailures
	}
	if c.InfoRetries <= 0 {
		c.InfoRetries = DefaultInfoRetries
	}
	if c.InfoRetryInterval <= 0 {
		c.InfoRetryInterval = DefaultInfoRetryInterval
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderSize <= 0 {
		c.MaxHeaderSize = DefaultMaxHeaderSize
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultPageSize
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// disaggregationMode is what /server_info reports as disaggregation_mode:
// SGLang's default for a non-disaggregated server is the string "null".
func (r Role) disaggregationMode() string {
	if r == RoleAggregated {
		return "null"
	}
	return string(r)
}
