package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"pdlb/bench"
)

// benchCmd sends load to an endpoint and reports what it measured.
type benchCmd struct {
	URL          string        `arg:"" help:"Base URL of the target: pdlb, mini_lb, a router or a worker." placeholder:"URL"`
	Route        string        `help:"API to call." default:"/generate" enum:"/generate,/v1/completions,/v1/chat/completions"`
	Stream       bool          `help:"Ask for server-sent events and measure time to first token and inter-token latency."`
	Concurrency  int           `help:"Clients in the closed loop, each sending its next request when the previous one ends." default:"1" short:"c"`
	Requests     int           `help:"Stop after this many measured requests (0: bounded by --duration)." short:"n"`
	Duration     time.Duration `help:"Measured time after the warm-up (default 10s when --requests is 0)." short:"d"`
	Warmup       time.Duration `help:"Time at the start whose requests are left out of the figures."`
	MaxNewTokens int           `help:"Output tokens asked for per request." default:"16"`
	PromptWords  int           `help:"Prompt length in words." default:"32"`
	Seed         uint64        `help:"Seed for the prompt text." placeholder:"N"`
	Model        string        `help:"The model field on OpenAI routes." default:"default"`
	Timeout      time.Duration `help:"Longest a request may take." default:"60s"`
	JSON         string        `help:"Also write the report as JSON to this file ('-' for standard output)." placeholder:"FILE"`
	Quiet        bool          `help:"No progress line (there is none when standard error is not a terminal)." short:"q"`
}

// Run runs the load until done or interrupted, then prints the report.
func (c *benchCmd) Run() error {
	cfg := bench.Config{
		URL:          c.URL,
		Route:        c.Route,
		Stream:       c.Stream,
		Concurrency:  c.Concurrency,
		Requests:     c.Requests,
		Duration:     c.Duration,
		Warmup:       c.Warmup,
		MaxNewTokens: c.MaxNewTokens,
		PromptWords:  c.PromptWords,
		Seed:         c.Seed,
		Model:        c.Model,
		Timeout:      c.Timeout,
	}
	if !c.Quiet && isTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := report.WriteText(os.Stdout); err != nil {
		return err
	}
	return c.writeJSON(report)
}

// isTerminal reports whether f is a terminal, where a redrawn progress line
// makes sense (in a log file it is noise).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (c *benchCmd) writeJSON(report *bench.Report) error {
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
