package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"pdlb/lb/cli"
)

// Command is `pdlb bench`: it sends load to an endpoint, or to several in
// turn, and reports what it measured.
type Command struct {
	URL     string        `arg:"" optional:"" help:"The target (pdlb, mini_lb, a router or a worker): its base URL (http://HOST:PORT, or with a path prefix), or the URL of the route to call (http://HOST:PORT/v1/completions). Or use --compare." placeholder:"URL"`
	Compare []string      `help:"Send the same load to each target in turn, in rounds, and print their figures side by side with each one's ratio to the first; repeat for each target (or list them with commas)." placeholder:"NAME=URL" sep:","`
	Round   time.Duration `help:"Longest turn of one target with --compare: each target's --duration is cut into rounds no longer than this." default:"2s"`

	Route       *string  `help:"API to call: /generate, /v1/completions or /v1/chat/completions (default: the one the URL ends in, else /generate)." enum:"/generate,/v1/completions,/v1/chat/completions" placeholder:"PATH"`
	Stream      bool     `help:"Ask for server-sent events and measure time to first token, inter-token latency, events/s and (against pdlb fake) event lag."`
	Concurrency *int     `help:"Closed loop: clients, each sending its next request when the previous one ends (default 1)." short:"c" xor:"load" placeholder:"N"`
	Rate        *float64 `help:"Open loop: mean requests per second (more than 0), arriving as a Poisson process (seeded by --seed) whatever the answers do." placeholder:"REQ/S" xor:"load"`
	MaxInflight int      `help:"Open loop: most requests in flight; an arrival beyond is not sent and counts as a 'dropped' error." default:"10000"`

	Requests int            `help:"Stop after this many measured requests (0: bounded by --duration; not with --compare)." short:"n" placeholder:"N"`
	Duration *time.Duration `help:"Measured time after the warm-up (more than 0), per target with --compare (default 10s when --requests is 0)." short:"d"`
	Warmup   time.Duration  `help:"Time at the start (of each target's first round with --compare) whose requests are left out of the figures."`

	Workload string            `help:"What to send: unique-prefix, prompts of --prompt-words (or --prompts) that share no prefix; or generated-shared-prefix, SGLang bench_serving's workload of the --gsp-* flags, each request sent once (the run ends when all are answered, or at --duration), reporting the prefix cache's hit rate against the best any router could reach." enum:"unique-prefix,generated-shared-prefix" default:"unique-prefix"`
	GSP      SharedPrefixFlags `embed:"" prefix:"gsp-"`

	MaxNewTokens Dist     `help:"Output tokens asked for per request: N, or drawn per request from uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD (N, MAX and MEAN at most 1048576; draws rounded and kept within 1-1048576)." default:"16"`
	PromptWords  Dist     `help:"Prompt length in words, as --max-new-tokens (ignored with --prompts)." default:"32"`
	Prompts      string   `help:"Send the prompts of this JSON Lines file round robin, verbatim: an object a line with a \"prompt\" string or a \"messages\" list, and optionally \"max_new_tokens\" or \"max_tokens\"." placeholder:"FILE"`
	Seed         uint64   `help:"Seed for prompt text, drawn sizes and open-loop arrivals." placeholder:"N"`
	Model        string   `help:"The model field on OpenAI routes." default:"default"`
	Header       []string `help:"Send this header with every request; repeat for more." placeholder:"'NAME: VALUE'" short:"H" sep:"none"`
	APIKey       string   `help:"Send 'Authorization: Bearer KEY' with every request, for a target behind an API key (SGLang's, pdlb's or an OpenAI-style server's --api-key)." placeholder:"KEY"`

	Timeout     time.Duration `help:"Longest a request may take (0: no limit)." default:"60s"`
	GiveUpAfter time.Duration `help:"Stop the run when no request to a target has succeeded for this long of its own time (at least 5 failed, and none that started earlier is still in flight), and say what they failed with (0: never, e.g. to load a server through a restart)." default:"3s"`
	JSON        string        `help:"Also write the report (with --compare, every target's) as JSON to this file, created before the load starts; '-' writes it to standard output, and the table to standard error." placeholder:"FILE"`
	Quiet       bool          `help:"Show no progress: by default a bar on standard error, redrawn in place on a terminal, else a line every 5 s." short:"q"`
}

// SharedPrefixFlags are the --gsp-* flags of --workload
// generated-shared-prefix, with SGLang bench_serving's names and defaults.
type SharedPrefixFlags struct {
	NumGroups       int     `help:"Generated-shared-prefix: system prompts, each a group's." default:"64"`
	PromptsPerGroup int     `help:"Generated-shared-prefix: requests a group, each a question after the group's system prompt." default:"16"`
	SystemPromptLen int     `help:"Generated-shared-prefix: system prompt length in words (one token each to pdlb fake, about one to a real tokenizer)." default:"2048"`
	QuestionLen     int     `help:"Generated-shared-prefix: question length in words." default:"128"`
	OutputLen       int     `help:"Generated-shared-prefix: output tokens a request." default:"256"`
	RangeRatio      float64 `help:"Generated-shared-prefix: draw each length from this share of it to all of it (1: exact)." default:"1.0"`
	Ordered         bool    `help:"Generated-shared-prefix: send the requests group after group, not shuffled by --seed."`
	SendRoutingKey  bool    `help:"Generated-shared-prefix: send an X-SMG-Routing-Key header naming each request's group, for routers that route by it."`
	HotShare        float64 `help:"Generated-shared-prefix, skewed (pdlb's own): the share of the requests (0 to 1) that the first group takes, the others sharing the rest; 0 for bench_serving's even groups." default:"0"`
}

// sharedPrefix converts the flags, refusing a count below 1, which
// SharedPrefix would take for its default; a range ratio of 0,
// bench_serving's lengths from 1 to all, is SharedPrefix's smallest above
// 0, as its 0 is the default.
func (f *SharedPrefixFlags) sharedPrefix() (*SharedPrefix, error) {
	for _, n := range []struct {
		flag string
		v    int
	}{
		{"num-groups", f.NumGroups}, {"prompts-per-group", f.PromptsPerGroup},
		{"system-prompt-len", f.SystemPromptLen}, {"question-len", f.QuestionLen}, {"output-len", f.OutputLen},
	} {
		if n.v < 1 {
			return nil, fmt.Errorf("--gsp-%s %d: want at least 1", n.flag, n.v)
		}
	}
	if !(f.RangeRatio >= 0 && f.RangeRatio <= 1) {
		return nil, fmt.Errorf("--gsp-range-ratio %v: want 0 to 1", f.RangeRatio)
	}
	if !(f.HotShare >= 0 && f.HotShare < 1) {
		return nil, fmt.Errorf("--gsp-hot-share %v: want 0 to less than 1", f.HotShare)
	}
	s := &SharedPrefix{
		Groups: f.NumGroups, PromptsPerGroup: f.PromptsPerGroup, SystemPromptLen: f.SystemPromptLen,
		QuestionLen: f.QuestionLen, OutputLen: f.OutputLen, RangeRatio: f.RangeRatio,
		Ordered: f.Ordered, SendRoutingKey: f.SendRoutingKey, HotShare: f.HotShare,
	}
	if f.RangeRatio == 0 {
		s.RangeRatio = math.SmallestNonzeroFloat64
	}
	return s, nil
}

// Help shows examples under the command's summary.
func (c *Command) Help() string {
	return `The load is a closed loop (-c clients) or an open one (--rate), for a time (-d) or a number of requests (-n). The progress shows on standard error, the report on standard output. Examples:

  pdlb bench http://127.0.0.1:8000 -c 16 -d 30s
  pdlb bench http://127.0.0.1:8000/v1/chat/completions --stream --rate 20 -n 1000
  pdlb bench http://127.0.0.1:8000 --workload generated-shared-prefix -c 16 --stream
  pdlb bench --compare direct=http://127.0.0.1:30000 --compare pdlb=http://127.0.0.1:8000 -c 8 -d 20s`
}

// Validate requires one way of naming the target.
func (c *Command) Validate() error {
	switch {
	case c.URL == "" && len(c.Compare) == 0:
		return errors.New("give the target's URL, or --compare NAME=URL for each target")
	case c.URL != "" && len(c.Compare) > 0:
		return errors.New("give either a URL or --compare targets, not both")
	}
	return nil
}

// Run runs the load until done or interrupted, then prints the report. It
// fails after the report when the run was interrupted (exit status 128 +
// the signal, as shells report a process killed by it) or when some target
// answered no request successfully, so that a script, or a mistyped port,
// cannot take either for a good run. A second signal ends the process
// through exit, main's.
func (c *Command) Run(exit cli.Exit) error {
	ctx, stop := catchSignals(exit, time.Now)
	defer stop()
	return c.run(ctx, os.Stdout, os.Stderr)
}

// report is what Run prints: a *Report or a *Comparison.
type report interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
}

// run does Run's work, writing to stdout and stderr.
func (c *Command) run(ctx context.Context, stdout, stderr io.Writer) error {
	cfg, err := c.config()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	cfg.Progress, cfg.ProgressLines = progressOn(stderr, c.Quiet)
	table, jsonOut, err := c.outputs(stdout, stderr)
	if err != nil {
		return err
	}
	defer jsonOut.Close()
	var rep report
	var reports []*Report
	// Run and Compare refuse a configuration before any load, and fail
	// for nothing else: their errors are usage errors.
	if len(c.Compare) > 0 {
		cmp, err := c.compare(ctx, cfg)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		rep, reports = cmp, cmp.Reports
	} else {
		r, err := Run(ctx, cfg)
		if err != nil {
			return cli.UsageError{Err: err}
		}
		rep, reports = r, []*Report{r}
	}
	if err := rep.WriteText(table); err != nil {
		return err
	}
	if jsonOut != nil {
		if err := rep.WriteJSON(jsonOut); err != nil {
			return fmt.Errorf("cannot write the JSON report: %w", err)
		}
		if err := jsonOut.Close(); err != nil {
			return fmt.Errorf("cannot write the JSON report: %w", err)
		}
	}
	return runFailure(ctx, reports)
}

// compare runs the load on the --compare targets in turn.
func (c *Command) compare(ctx context.Context, cfg Config) (*Comparison, error) {
	targets := make([]Target, len(c.Compare))
	for i, s := range c.Compare {
		t, err := ParseTarget(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--compare: %w", err)
		}
		targets[i] = t
	}
	return Compare(ctx, cfg, targets)
}

// outputs returns where the table goes and the JSON report's file, if any.
// The file is created now, as a shell redirection would be, so that a bad
// path fails before any load rather than losing a long run's report. With
// '-' the JSON takes standard output and the table moves to standard
// error, so the output is JSON alone and a person still sees the table.
func (c *Command) outputs(stdout, stderr io.Writer) (table io.Writer, jsonOut *jsonFile, err error) {
	switch c.JSON {
	case "":
		return stdout, nil, nil
	case "-":
		return stderr, &jsonFile{Writer: stdout}, nil
	}
	f, err := os.Create(c.JSON)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot write the JSON report: %w", err)
	}
	return stdout, &jsonFile{Writer: f, f: f}, nil
}

// jsonFile is where the JSON report goes: a file, closed once, or standard
// output, never closed. A nil *jsonFile is no JSON report.
type jsonFile struct {
	io.Writer
	f *os.File
}

// Close closes the file, if any, once; a nil jsonFile is fine.
func (j *jsonFile) Close() error {
	if j == nil || j.f == nil {
		return nil
	}
	f := j.f
	j.f = nil
	return f.Close()
}

// exitError fails a run that printed its report, with an exit status of
// its own (kong exits with ExitCode).
type exitError struct {
	msg  string
	code int
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

// signalError is the cause of a run's context cancelled by a signal.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string {
	name := e.sig.String()
	switch e.sig {
	case syscall.SIGINT:
		name = "SIGINT"
	case syscall.SIGTERM:
		name = "SIGTERM"
	}
	return "interrupted by " + name
}

// exitCode is the status of a run interrupted by the signal: 128 + its
// number (130 for SIGINT, 143 for SIGTERM).
func (e signalError) exitCode() int { return 128 + int(e.sig) }

// runFailure returns the error a finished run exits with, after its report:
// the interrupting signal's, or one when the run gave a target up or a
// target had no request succeed.
func runFailure(ctx context.Context, reports []*Report) error {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		return &exitError{msg: se.Error(), code: se.exitCode()}
	}
	if ctx.Err() != nil {
		return &exitError{msg: "interrupted", code: 128 + int(syscall.SIGINT)}
	}
	var failed []string
	for _, r := range reports {
		target := r.URL
		if r.Name != "" {
			target = r.Name
		}
		if r.GaveUp != "" {
			return &exitError{msg: fmt.Sprintf("gave up on %s: %s", target, r.GaveUp), code: 1}
		}
		if r.OK == 0 {
			failed = append(failed, target)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	// Every one: a message that named the first alone hid the others.
	targets := failed[len(failed)-1]
	if n := len(failed); n > 1 {
		targets = strings.Join(failed[:n-1], ", ") + " or " + failed[n-1]
	}
	return &exitError{msg: fmt.Sprintf("no request to %s succeeded", targets), code: 1}
}

// catchSignals returns a context the first SIGINT or SIGTERM cancels, with
// a signalError as its cause, so the run stops and prints what it has. A
// second one calls exit at once, as that can take a while (requests are
// cut, but a stuck write can hold them); one within cli.SameSignalWindow of the
// first is the first delivered twice. stop gives the signals back their
// default action.
func catchSignals(exit func(code int), now func() time.Time) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first time.Time
		for {
			select {
			case sig := <-sigs:
				se := signalError{sig.(syscall.Signal)}
				switch {
				case first.IsZero():
					first = now()
					cancel(se)
				case now().Sub(first) >= cli.SameSignalWindow:
					exit(se.exitCode())
					return
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// config converts the flags, reading the prompt file if any.
func (c *Command) config() (Config, error) {
	cfg := Config{
		URL:          c.URL,
		Stream:       c.Stream,
		MaxInflight:  c.MaxInflight,
		Requests:     c.Requests,
		Warmup:       c.Warmup,
		Round:        c.Round,
		MaxNewTokens: c.MaxNewTokens,
		PromptWords:  c.PromptWords,
		Seed:         c.Seed,
		Model:        c.Model,
		Timeout:      c.Timeout,
	}
	if c.Timeout == 0 {
		cfg.Timeout = NoTimeout // Config's zero is its default, 60 s
	}
	cfg.GiveUpAfter = c.GiveUpAfter
	if c.GiveUpAfter == 0 {
		cfg.GiveUpAfter = NoGiveUp // as for the timeout
	}
	if c.Route != nil {
		if err := c.checkRoute(*c.Route); err != nil {
			return cfg, err
		}
		cfg.Route = *c.Route
	}
	if err := c.setLoad(&cfg); err != nil {
		return cfg, err
	}
	headers, err := c.headers()
	if err != nil {
		return cfg, err
	}
	cfg.Headers = headers
	if c.Prompts != "" {
		if cfg.Prompts, err = readPromptFile(c.Prompts); err != nil {
			return cfg, err
		}
	}
	if c.Workload == WorkloadSharedPrefix {
		if cfg.SharedPrefix, err = c.GSP.sharedPrefix(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// setLoad sets the load's shape from --concurrency, --rate and --duration.
// Their nil is not given, Config's default; given, a zero, which Config
// would read as its default too, is a mistake, refused here with the
// flag's name.
func (c *Command) setLoad(cfg *Config) error {
	if c.Concurrency != nil {
		if *c.Concurrency < 1 {
			return fmt.Errorf("--concurrency %d: want at least 1 client", *c.Concurrency)
		}
		cfg.Concurrency = *c.Concurrency
	}
	if c.Rate != nil {
		if !(*c.Rate > 0) {
			return fmt.Errorf("--rate %v: want more than 0 requests per second", *c.Rate)
		}
		cfg.Rate = *c.Rate
	}
	if c.Duration != nil {
		if *c.Duration <= 0 {
			return fmt.Errorf("--duration %v: want more than 0", *c.Duration)
		}
		cfg.Duration = *c.Duration
	}
	return nil
}

// readPromptFile reads --prompts' JSON Lines file, before any load, so
// that a bad file fails the command rather than the run.
func readPromptFile(name string) ([]Prompt, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read prompts: %w", err)
	}
	defer f.Close()
	prompts, err := ReadPrompts(f)
	if err != nil {
		return nil, fmt.Errorf("cannot read prompts from %s: %w", name, err)
	}
	return prompts, nil
}

// headers are the --header flags' and --api-key's headers, in order.
func (c *Command) headers() ([][2]string, error) {
	var headers [][2]string
	for _, h := range c.Header {
		name, value, ok := strings.Cut(h, ":")
		if name = strings.TrimSpace(name); !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("--header %q: want 'NAME: VALUE'", h)
		}
		headers = append(headers, [2]string{name, strings.TrimSpace(value)})
	}
	if c.APIKey != "" {
		for _, h := range headers {
			if strings.EqualFold(h[0], "Authorization") {
				return nil, errors.New("--api-key and --header 'Authorization: ...' both set the Authorization header; give one")
			}
		}
		headers = append(headers, [2]string{"Authorization", "Bearer " + c.APIKey})
	}
	return headers, nil
}

// progressOn returns where the progress display goes, and whether as a
// line every few seconds: nowhere with --quiet; a line redrawn in place on
// a terminal; plain lines otherwise, for a log or a pipe, where '\r' is
// noise (and where nothing at all was shown, issue 20).
func progressOn(stderr io.Writer, quiet bool) (w io.Writer, lines bool) {
	if quiet {
		return nil, false
	}
	f, ok := stderr.(*os.File)
	return stderr, !ok || !cli.IsTerminal(f)
}

// checkRoute refuses a --route that a target's URL contradicts by ending in
// another route (Run would too, without naming the flag).
func (c *Command) checkRoute(route string) error {
	urls := []string{c.URL}
	for _, s := range c.Compare {
		if t, err := ParseTarget(strings.TrimSpace(s)); err == nil {
			urls = append(urls, t.URL)
		}
	}
	for _, u := range urls {
		if own := URLRoute(u); own != "" && own != route {
			return fmt.Errorf("the URL %s ends in the route %s, but --route is %s: drop the route from the URL, or --route", u, own, route)
		}
	}
	return nil
}
