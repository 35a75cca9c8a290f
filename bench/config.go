package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"
)

// Routes a run can target.
const (
	// RouteGenerate is SGLang's native generation API.
	RouteGenerate = "/generate"
	// RouteCompletions is the OpenAI text completions API.
	RouteCompletions = "/v1/completions"
	// RouteChatCompletions is the OpenAI chat completions API.
	RouteChatCompletions = "/v1/chat/completions"
)

// Defaults applied by Run and Compare to zero Config fields.
const (
	defaultConcurrency  = 1
	defaultMaxInflight  = 10000
	defaultDuration     = 10 * time.Second
	defaultRound        = 2 * time.Second
	defaultMaxNewTokens = 16
	defaultPromptWords  = 32
	defaultModel        = "default"
	defaultTimeout      = 60 * time.Second
)

// NoTimeout, as Config.Timeout, lets a request take as long as it takes.
// It is a century, as deadlines are times; a Report shows it as 0 in JSON,
// as `pdlb bench --timeout 0` takes it.
const NoTimeout = 100 * 365 * 24 * time.Hour

// Config describes one load run. Zero values mean the documented defaults;
// negative numbers are errors. Run and Compare copy the Config, so changing
// it afterwards has no effect (Prompts included: they only read it).
type Config struct {
	// URL is the target (required by Run; Compare ignores it): a base URL,
	// e.g. "http://127.0.0.1:8000", or one ending in the route to call,
	// e.g. "http://127.0.0.1:8000/v1/completions"; https is supported. A
	// path that does not end in a route is a prefix the route is appended
	// to ("http://host/prefix" calls "/prefix/generate"), except a final
	// "/v1", an OpenAI base URL, which the OpenAI routes start with
	// ("http://host/v1" calls "/v1/completions", and is an error with
	// RouteGenerate).
	URL string
	// Route is the API to call: RouteGenerate, RouteCompletions or
	// RouteChatCompletions. Empty means the route the URL ends in (every
	// target's in Compare, which must then agree), else RouteGenerate; a
	// URL that ends in another route is an error.
	Route string
	// Stream asks for server-sent events ("stream": true) and measures time
	// to first token, inter-token latency and event lag from them.
	Stream bool

	// Concurrency is the number of clients in the closed loop, each sending
	// its next request when the previous one ends. Zero means 1, unless
	// Rate is set; setting both is an error.
	Concurrency int
	// Rate, when positive, makes the load an open loop instead: requests
	// arrive as a Poisson process of this mean rate per second (gaps drawn
	// from an exponential law seeded with Seed), each sent at its arrival
	// whatever the earlier ones are doing. A generator that falls behind
	// its schedule catches up, but stops 100 ms past the end of Duration
	// whatever is left.
	Rate float64
	// MaxInflight caps the requests in flight of the open loop: an arrival
	// that finds this many is not sent, and counts as a KindDropped error.
	// Zero means 10000. The closed loop ignores it.
	MaxInflight int
	// Requests stops the run once this many measured requests have started
	// (warm-up ones not included). Zero means the run is bounded by
	// Duration instead. Compare does not take it.
	Requests int
	// Duration is the measured window after the warm-up; in Compare, each
	// target's share of it, in rounds. Zero means 10 s when Requests is
	// zero, and no time bound when it is not; when both are set, whichever
	// ends first stops the run.
	Duration time.Duration
	// Warmup is the time, from the start, during which requests are sent
	// but left out of every figure; in Compare, at the start of each
	// target's first round. Zero means no warm-up.
	Warmup time.Duration
	// Round is the longest turn of one target in Compare: each target's
	// Duration is cut into rounds no longer than this, and the targets take
	// turns, so that noise on the machine hits them all alike. Zero means
	// 2 s; below 100 ms is an error. Run ignores it.
	Round time.Duration

	// MaxNewTokens is the output length asked for: sampling_params.max_new_tokens
	// on RouteGenerate, max_tokens on the OpenAI routes, always with
	// ignore_eos so every answer has that length. The zero Dist means 16.
	MaxNewTokens Dist
	// PromptWords is the prompt length in words; the first word is the
	// request number, the others come from a fixed vocabulary by a
	// generator seeded with Seed. The zero Dist means 32. It is ignored
	// when Prompts is set.
	PromptWords Dist
	// Prompts, when not empty, are sent instead of generated prompts,
	// request number n using Prompts[(n-1) % len(Prompts)], verbatim.
	Prompts []Prompt
	// SharedPrefix, when not nil, replaces the generated prompts with
	// SGLang's generated-shared-prefix workload (its doc says what it is),
	// which then sets the prompts, the output lengths (MaxNewTokens and
	// PromptWords are ignored) and the request count: each of its requests
	// is sent once, and Run ends when all have been answered, or at
	// Duration if that comes first. Compare gives each target the whole
	// workload within Duration (10 s unless set), in its turns. Prompts,
	// Requests and Warmup must then be zero.
	SharedPrefix *SharedPrefix
	// Seed makes the run reproducible: prompt text, drawn sizes (a
	// function of Seed and the request number) and open-loop arrivals.
	Seed uint64
	// Model is the "model" field on the OpenAI routes. Empty means
	// "default".
	Model string
	// Headers are sent with every request, as name and value (an
	// Authorization for a target behind an API key, say). They replace
	// the bench's own of the same name but Content-Length; a name listed
	// twice sends both values.
	Headers [][2]string

	// Timeout bounds each request, a whole stream included. Zero means
	// 60 s; NoTimeout, no bound.
	Timeout time.Duration
	// GiveUpAfter stops the run (the whole comparison in Compare) once no
	// request to a target has succeeded for this long since the first
	// failure (counting the target's own turns alone in Compare), at
	// least 5 have failed in a row, warm-up included, and none that
	// started before the first is still in flight (it may yet succeed): a
	// wrong URL or a dead server then ends the run in seconds, its report
	// saying why (Report.GaveUp, Report.GaveUpMessages), instead of
	// failing thousands of requests a second to the end. Zero means 3 s;
	// NoGiveUp never gives up, for a run meant to go on through failures
	// (a restart under load).
	GiveUpAfter time.Duration
	// Dial connects to the target address ("host:port"), and must give up
	// when ctx, the run's, is done: an interrupted run waits for it. Nil
	// means TCP over IPv4 or IPv6, within Timeout; tests pass an in-memory
	// dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// staleCheckAfter and connectPause, set by tests, stand in for the
	// constants of those names; now, for the clock of GiveUpAfter.
	staleCheckAfter time.Duration
	connectPause    time.Duration
	now             func() time.Time

	// Progress, when not nil, gets a progress display: the share done as
	// a bar, the time elapsed and in all, the requests done (and asked
	// for), errors, successful requests a second and the time left. It is
	// one line rewritten with '\r' four times a second and cleared at the
	// end, for a terminal, or with ProgressLines one line every 5 s. It is
	// written from one goroutine only, and never after Run or Compare
	// returns.
	Progress io.Writer
	// ProgressLines makes the progress display a plain line (no bar, no
	// '\r') every 5 s, for a log or a pipe. False means the redrawn line.
	ProgressLines bool
}

// validate rejects what no default can fix, URL included.
func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("url is required")
	}
	return c.validateLoad()
}

// validateLoad rejects what no default can fix, except a missing URL.
func (c *Config) validateLoad() error {
	switch c.Route {
	case "", RouteGenerate, RouteCompletions, RouteChatCompletions:
	default:
		return fmt.Errorf("unsupported route %q; want %s, %s or %s",
			c.Route, RouteGenerate, RouteCompletions, RouteChatCompletions)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"concurrency", int64(c.Concurrency)},
		{"max inflight", int64(c.MaxInflight)},
		{"requests", int64(c.Requests)},
		{"duration", int64(c.Duration)},
		{"warmup", int64(c.Warmup)},
		{"round", int64(c.Round)},
		{"timeout", int64(c.Timeout)},
		{"give up after", int64(c.GiveUpAfter)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative", f.name)
		}
	}
	if err := c.checkSharedPrefix(); err != nil {
		return err
	}
	if !(c.Rate >= 0) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("rate must be a finite number of requests per second, not %v", c.Rate)
	}
	if c.Rate > 0 && c.Concurrency > 0 {
		return errors.New("concurrency and rate are exclusive: concurrency makes a closed loop, rate an open one")
	}
	for _, d := range []struct {
		name string
		d    Dist
	}{{"max new tokens", c.MaxNewTokens}, {"prompt words", c.PromptWords}} {
		if d.d != (Dist{}) {
			if err := d.d.check(); err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
		}
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Route == "" {
		c.Route = RouteGenerate
	}
	if c.Concurrency == 0 && c.Rate == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = defaultMaxInflight
	}
	if c.SharedPrefix != nil {
		// A copy: the caller's stays as given.
		s := c.SharedPrefix.withDefaults()
		c.SharedPrefix = &s
		c.Requests = s.Groups * s.PromptsPerGroup
	}
	if c.Requests == 0 && c.Duration == 0 {
		c.Duration = defaultDuration
	}
	if c.Round == 0 {
		c.Round = defaultRound
	}
	if c.MaxNewTokens == (Dist{}) {
		c.MaxNewTokens = Fixed(defaultMaxNewTokens)
	}
	if c.PromptWords == (Dist{}) {
		c.PromptWords = Fixed(defaultPromptWords)
	}
	if c.Model == "" {
		c.Model = defaultModel
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.GiveUpAfter == 0 {
		c.GiveUpAfter = defaultGiveUpAfter
	}
	return c
}

// openLoop reports whether the load is an open loop.
func (c *Config) openLoop() bool { return c.Rate > 0 }

// maxConns is the most requests the load keeps in flight at once.
func (c *Config) maxConns() int {
	if c.openLoop() {
		return c.MaxInflight
	}
	return c.Concurrency
}
