package fake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"pdlb/lb/cli"
)

// Command is `pdlb fake`: it runs fake SGLang servers that speak the PD
// protocol as real ones do, bugs included. Servers started by one command
// meet for their KV transfers in memory; servers of separate commands meet
// over HTTP.
type Command struct {
	Prefill    []string `help:"Serve a fake prefill on this address; its bootstrap server listens on the same host at --bootstrap-port (plus one for each further prefill); repeat for more (or list them with commas)." placeholder:"HOST:PORT" sep:","`
	Decode     []string `help:"Serve a fake decode on this address; repeat for more (or list them with commas)." placeholder:"HOST:PORT" sep:","`
	Aggregated []string `help:"Serve a fake aggregated (non-disaggregated) server on this address; repeat for more (or list them with commas)." placeholder:"HOST:PORT" sep:","`

	BootstrapPort        int           `help:"Bootstrap port of the first prefill; a decode substitutes it when a request's bootstrap_port is null." default:"8998" type:"port"`
	Model                string        `help:"Model name the servers report." default:"fake-model"`
	APIKey               string        `help:"Require 'Authorization: Bearer KEY' on every route but /health* and /metrics, as SGLang's --api-key." placeholder:"KEY"`
	Tokens               int           `help:"Tokens generated when a request does not say how many." default:"16"`
	TokenDelay           time.Duration `help:"Time between two generated tokens (stream events)."`
	PrefillDelay         time.Duration `help:"Time a prefill spends on a prompt."`
	PrefillTokenDelay    time.Duration `help:"Performance model: time a prefill spends per uncached prompt token, on top of --prefill-delay."`
	MaxPrefills          int           `help:"Performance model: prompts a prefill computes at once per DP rank; the rest queue (0: no bound)."`
	CacheTokens          int           `help:"Performance model: capacity in tokens of each prefill's prefix cache per DP rank, an LRU of page-sized blocks (0: no cache, cached_tokens always 0)."`
	PageSize             int           `help:"Performance model: tokens per prefix-cache block, SGLang's --page-size." default:"1"`
	BatchTokenDelay      time.Duration `help:"Performance model: what each other request decoding on the same DP rank adds to --token-delay."`
	MaxTotalTokens       int           `help:"Performance model: KV tokens a decode holds per DP rank (prompt + max tokens of each request); requests beyond wait (0: no bound)."`
	EnableCacheReport    bool          `help:"Report usage.prompt_tokens_details.cached_tokens on the OpenAI routes, as SGLang's --enable-cache-report."`
	StartDelay           time.Duration `help:"Answer /health with 503 for this long after starting, as a loading server does."`
	DPSize               int           `help:"Data-parallel ranks each server reports." default:"1"`
	RegisterDelay        time.Duration `help:"A prefill's bootstrap server answers 503 'not fully registered' for this long after starting."`
	OldBootstrapAPI      bool          `help:"Answer the bootstrap /route API of SGLang before 2026-02-23."`
	FirstRequestBug      bool          `help:"Decode: fail a first request carrying disagg_prefill_dp_rank as SGLang did before PR #22990."`
	DecodeConditionalAgg bool          `help:"Decode: serve requests marked do_local_prefill itself (SGLang PR #34773, --disaggregation-decode-enable-conditional-agg)."`
	KVTimeout            time.Duration `help:"How long either side of a KV transfer waits for the other." default:"30s"`
	HeartbeatInterval    time.Duration `help:"Decode: time between health polls of the bootstrap servers of the prefills it knows (SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL)." default:"5s"`
	HeartbeatMaxFailures int           `help:"Decode: failed health polls in a row after which it forgets a prefill's parallel info and fails the requests waiting on it (SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE)." default:"2"`
	ClientWatchDelay     time.Duration `help:"How long a request runs before the server watches its client for going away (SGLang notices within seconds)." default:"1s"`
	StatsRoute           bool          `help:"Serve the fake's counters as JSON on GET /fake/stats, a route SGLang does not have (for tests that run the fake in another process)."`
	Canary               string        `help:"Count, in /fake/stats' Canaries, the requests that carry this string in a header or the body: tests plant it where a load balancer must not pass it on." placeholder:"STRING"`

	cli.LogFlags
}

// Validate requires at least one server and a sane performance model.
func (c *Command) Validate() error {
	if len(c.Prefill)+len(c.Decode)+len(c.Aggregated) == 0 {
		return errors.New("nothing to serve: give --prefill, --decode or --aggregated addresses")
	}
	if last := c.BootstrapPort + max(len(c.Prefill)-1, 0); c.BootstrapPort <= 0 || last > 65535 {
		return fmt.Errorf("--bootstrap-port %d: the prefills' bootstrap ports would run from %d to %d, outside 1-65535", c.BootstrapPort, c.BootstrapPort, last)
	}
	if c.PageSize < 1 || c.MaxPrefills < 0 || c.CacheTokens < 0 || c.MaxTotalTokens < 0 {
		return errors.New("--page-size must be at least 1, and --max-prefills, --cache-tokens and --max-total-tokens not negative")
	}
	return nil
}

// Run starts the servers and serves until SIGINT or SIGTERM.
func (c *Command) Run() error {
	log := c.Logger(os.Stderr)
	nw := NewTCPNetwork()
	var servers []*Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	start := func(role Role, addr string, bootstrapPort int) error {
		cfg := c.config(role, bootstrapPort)
		cfg.Log = log.With().Str("fake", string(role)).Str("addr", addr).Logger()
		s := New(cfg)
		if err := s.Start(nw, addr); err != nil {
			return fmt.Errorf("cannot start the fake %s on %s: %w", role, addr, err)
		}
		servers = append(servers, s)
		log.Info().Str("role", string(role)).Str("addr", addr).Int("bootstrap_port", cfg.BootstrapPort).Msg("fake server up")
		return nil
	}
	for i, addr := range cli.ListItems(c.Prefill) {
		if err := start(RolePrefill, addr, c.BootstrapPort+i); err != nil {
			return err
		}
	}
	for _, addr := range cli.ListItems(c.Decode) {
		if err := start(RoleDecode, addr, c.BootstrapPort); err != nil {
			return err
		}
	}
	for _, addr := range cli.ListItems(c.Aggregated) {
		if err := start(RoleAggregated, addr, c.BootstrapPort); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info().Msg("fake servers stopping")
	return nil
}

func (c *Command) config(role Role, bootstrapPort int) Config {
	return Config{
		Role:         role,
		Model:        c.Model,
		APIKey:       c.APIKey,
		Tokens:       c.Tokens,
		TokenDelay:   c.TokenDelay,
		PrefillDelay: c.PrefillDelay,

		PrefillTokenDelay: c.PrefillTokenDelay,
		MaxPrefills:       c.MaxPrefills,
		CacheTokens:       c.CacheTokens,
		PageSize:          c.PageSize,
		BatchTokenDelay:   c.BatchTokenDelay,
		MaxTotalTokens:    c.MaxTotalTokens,
		CacheReport:       c.EnableCacheReport,

		StartDelay:       c.StartDelay,
		BootstrapPort:    bootstrapPort,
		DPSize:           c.DPSize,
		RegisterDelay:    c.RegisterDelay,
		OldBootstrapAPI:  c.OldBootstrapAPI,
		FirstRequestBug:  c.FirstRequestBug,
		ConditionalAgg:   c.DecodeConditionalAgg,
		KVTimeout:        c.KVTimeout,
		ClientWatchDelay: c.ClientWatchDelay,
		StatsRoute:       c.StatsRoute,
		Canary:           c.Canary,

		HeartbeatInterval:    c.HeartbeatInterval,
		HeartbeatMaxFailures: c.HeartbeatMaxFailures,
	}
}
