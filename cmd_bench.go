package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"pdlb/bench"
)

// benchCmd sends load to an endpoint, or to several in turn, and reports
// what it measured.
type benchCmd struct {
	URL     string        `arg:"" optional:"" help:"Base URL of the target: pdlb, mini_lb, a router or a worker (or use --compare)." placeholder:"URL"`
	Compare []string      `help:"Send the same load to each target in turn, in rounds, and print their figures side by side with each one's ratio to the first; repeat for each target." placeholder:"NAME=URL" sep:"none"`
	Round   time.Duration `help:"Longest turn of one target with --compare: each target's --duration is cut into rounds no longer than this." default:"2s"`

	Route       string  `help:"API to call." default:"/generate" enum:"/generate,/v1/completions,/v1/chat/completions"`
	Stream      bool    `help:"Ask for server-sent events and measure time to first token, inter-token latency, events/s and (against pdlb fake) event lag."`
	Concurrency int     `help:"Closed loop: clients, each sending its next request when the previous one ends (default 1)." short:"c" xor:"load"`
	Rate        float64 `help:"Open loop: mean requests per second, arriving as a Poisson process (seeded by --seed) whatever the answers do." placeholder:"REQ/S" xor:"load"`
	MaxInflight int     `help:"Open loop: most requests in flight; an arrival beyond is not sent and counts as a 'dropped' error." default:"10000"`

	Requests int           `help:"Stop after this many measured requests (0: bounded by --duration; not with --compare)." short:"n"`
	Duration time.Duration `help:"Measured time after the warm-up, per target with --compare (default 10s when --requests is 0)." short:"d"`
	Warmup   time.Duration `help:"Time at the start (of each target's first round with --compare) whose requests are left out of the figures."`

	MaxNewTokens bench.Dist `help:"Output tokens asked for per request: N, or drawn per request from uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD (draws rounded, at least 1)." default:"16"`
	PromptWords  bench.Dist `help:"Prompt length in words, as --max-new-tokens (ignored with --prompts)." default:"32"`
	Prompts      string     `help:"Send the prompts of this JSON Lines file round robin, verbatim: an object a line with a \"prompt\" string or a \"messages\" list, and optionally \"max_new_tokens\" or \"max_tokens\"." placeholder:"FILE"`
	Seed         uint64     `help:"Seed for prompt text, drawn sizes and open-loop arrivals." placeholder:"N"`
	Model        string     `help:"The model field on OpenAI routes." default:"default"`

	Timeout time.Duration `help:"Longest a request may take." default:"60s"`
	JSON    string        `help:"Also write the report (with --compare, every target's) as JSON to this file ('-' for standard output)." placeholder:"FILE"`
	Quiet   bool          `help:"No progress line (there is none when standard error is not a terminal)." short:"q"`
}

// Validate requires one way of naming the target.
func (c *benchCmd) Validate() error {
	switch {
	case c.URL == "" && len(c.Compare) == 0:
		return errors.New("give the target's URL, or --compare NAME=URL for each target")
	case c.URL != "" && len(c.Compare) > 0:
		return errors.New("give either a URL or --compare targets, not both")
	}
	return nil
}

// Run runs the load until done or interrupted, then prints the report.
func (c *benchCmd) Run() error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if len(c.Compare) > 0 {
		return c.compare(ctx, cfg)
	}
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := report.WriteText(os.Stdout); err != nil {
		return err
	}
	return c.writeJSON(report)
}

// compare runs the load on the --compare targets in turn.
func (c *benchCmd) compare(ctx context.Context, cfg bench.Config) error {
	targets := make([]bench.Target, len(c.Compare))
	for i, s := range c.Compare {
		t, err := bench.ParseTarget(s)
		if err != nil {
			return fmt.Errorf("--compare: %w", err)
		}
		targets[i] = t
	}
	cmp, err := bench.Compare(ctx, cfg, targets)
	if err != nil {
		return err
	}
	if err := cmp.WriteText(os.Stdout); err != nil {
		return err
	}
	return c.writeJSON(cmp)
}

// config converts the flags, reading the prompt file if any.
func (c *benchCmd) config() (bench.Config, error) {
	cfg := bench.Config{
		URL:          c.URL,
		Route:        c.Route,
		Stream:       c.Stream,
		Concurrency:  c.Concurrency,
		Rate:         c.Rate,
		MaxInflight:  c.MaxInflight,
		Requests:     c.Requests,
		Duration:     c.Duration,
		Warmup:       c.Warmup,
		Round:        c.Round,
		MaxNewTokens: c.MaxNewTokens,
		PromptWords:  c.PromptWords,
		Seed:         c.Seed,
		Model:        c.Model,
		Timeout:      c.Timeout,
	}
	if c.Prompts != "" {
		f, err := os.Open(c.Prompts)
		if err != nil {
			return cfg, fmt.Errorf("cannot read prompts: %w", err)
		}
		defer f.Close()
		if cfg.Prompts, err = bench.ReadPrompts(f); err != nil {
			return cfg, fmt.Errorf("cannot read prompts from %s: %w", c.Prompts, err)
		}
	}
	if !c.Quiet && isTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	return cfg, nil
}

// isTerminal reports whether f is a terminal, where a redrawn progress line
// makes sense (in a log file it is noise).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// writeJSON writes the JSON report where --json says, if anywhere.
func (c *benchCmd) writeJSON(report interface{ WriteJSON(io.Writer) error }) error {
	switch c.JSON {
	case "":
		return nil
	case "-":
		return report.WriteJSON(os.Stdout)
	}
	f, err := os.Create(c.JSON)
	if err != nil {
		return fmt.Errorf("cannot write the JSON report: %w", err)
	}
	if err := report.WriteJSON(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot write the JSON report: %w", err)
	}
	return f.Close()
}
