package bench

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"
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

// Defaults applied by Run to zero Config fields.
const (
	defaultConcurrency  = 1
	defaultDuration     = 10 * time.Second
	defaultMaxNewTokens = 16
	defaultPromptWords  = 32
	defaultModel        = "default"
	defaultTimeout      = 60 * time.Second
)

// Config describes one load run. Zero values mean the documented defaults;
// negative numbers are errors. Run copies the Config, so changing it
// afterwards has no effect.
type Config struct {
	// URL is the target's base URL, e.g. "http://127.0.0.1:8000"
	// (required). A path is a prefix the route is appended to; https is
	// supported.
	URL string
	// Route is the API to call: RouteGenerate (the default),
	// RouteCompletions or RouteChatCompletions.
	Route string
	// Stream asks for server-sent events ("stream": true) and measures time
	// to first token and inter-token latency from them.
	Stream bool

	// Concurrency is the number of clients in the closed loop, each sending
	// its next request when the previous one ends. Zero means 1.
	Concurrency int
	// Requests stops the run once this many measured requests have started
	// (warm-up ones not included). Zero means the run is bounded by
	// Duration instead.
	Requests int
	// Duration is the measured window after the warm-up. Zero means 10 s
	// when Requests is zero, and no time bound when it is not; when both are
	// set, whichever ends first stops the run.
	Duration time.Duration
	// Warmup is the time, from the start, during which requests are sent
	// but left out of every figure. Zero means no warm-up.
	Warmup time.Duration

	// MaxNewTokens is the output length asked for: sampling_params.max_new_tokens
	// on RouteGenerate, max_tokens on the OpenAI routes, always with
	// ignore_eos so every answer has that length. Zero means 16.
	MaxNewTokens int
	// PromptWords is the prompt length in words; the first word is the
	// request number, the others are drawn from a fixed vocabulary by a
	// generator seeded with Seed. Zero means 32.
	PromptWords int
	// Seed makes the prompt text reproducible.
	Seed uint64
	// Model is the "model" field on the OpenAI routes. Empty means
	// "default".
	Model string

	// Timeout bounds each request, a whole stream included. Zero means 60 s.
	Timeout time.Duration
	// Dial connects to the target address ("host:port"). Nil means TCP;
	// tests pass an in-memory dialer.
	Dial fasthttp.DialFunc
	// Progress, when not nil, gets a one-line progress display rewritten
	// with '\r' about four times a second and cleared at the end. It is
	// written from one goroutine only, and never after Run returns.
	Progress io.Writer
}

// validate rejects what no default can fix.
func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("url is required")
	}
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
		{"requests", int64(c.Requests)},
		{"duration", int64(c.Duration)},
		{"warmup", int64(c.Warmup)},
		{"max new tokens", int64(c.MaxNewTokens)},
		{"prompt words", int64(c.PromptWords)},
		{"timeout", int64(c.Timeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative", f.name)
		}
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Route == "" {
		c.Route = RouteGenerate
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.Requests == 0 && c.Duration == 0 {
		c.Duration = defaultDuration
	}
	if c.MaxNewTokens == 0 {
		c.MaxNewTokens = defaultMaxNewTokens
	}
	if c.PromptWords == 0 {
		c.PromptWords = defaultPromptWords
	}
	if c.Model == "" {
		c.Model = defaultModel
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	return c
}
