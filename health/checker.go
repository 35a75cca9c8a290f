package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// State is what a Checker knows of a target. The zero value is Unknown.
type State int32

const (
	// Unknown means no probe of the target has completed yet.
	Unknown State = iota
	// Up means the target answers its probes.
	Up
	// Down means the target fails its probes.
	Down
)

// String returns "unknown", "up" or "down".
func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Defaults for the zero fields of Config.
const (
	defaultInterval = 5 * time.Second
	defaultTimeout  = 2 * time.Second
	defaultRise     = 2
	defaultFall     = 3
	defaultPath     = "/health"
)

const (
	// probeIdleTimeout drops an idle probe connection before the worker
	// does: uvicorn, which serves SGLang, closes idle keep-alive connections
	// after 5 s, and with a single attempt a probe sent on a connection the
	// worker is closing would count as a failure.
	probeIdleTimeout = 4 * time.Second
	// maxProbeBodySize bounds what a probe reads; /health has an empty body.
	maxProbeBodySize = 1 << 20
)

// Target is one endpoint that a Checker probes with GET Path. The Checker
// copies it in NewChecker, so later changes to the caller's value have no
// effect.
type Target struct {
	// Name identifies the target in logs, e.g. "decode 10.0.0.1:30010".
	Name string
	// Addr is the target's host:port.
	Addr string
	// Path is the probed path, starting with "/"; empty means "/health".
	Path string
	// TLS probes over HTTPS.
	TLS bool
	// OnChange, if not nil, is called with the new state on every
	// transition: Unknown→Up, Unknown→Down, Up→Down and Down→Up. It runs on
	// a goroutine of the Checker (inside CheckOnce or Run) after State
	// already reports the new state. Calls for one target never overlap and
	// arrive in order; calls for different targets may run concurrently.
	// It must not block, as it delays that target's next probe.
	OnChange func(s State)
	// OnProbe, if not nil, is called with the result of every probe that
	// counts: nil for a success, else why it failed. A failure under the
	// Fall threshold changes no State, yet may be the only sign that the
	// target restarted (one back within the Fall threshold). It runs as
	// OnChange does, after it for the same probe. Probes that do not count
	// (the round's context ended, OutOfResources) are not reported.
	OnProbe func(err error)
}

// Config tunes a Checker. The zero value probes every 5 s with a 2 s timeout,
// Rise 2 and Fall 3, over TCP, and logs nothing.
type Config struct {
	// Interval is the time between two rounds of probes; 0 means 5 s.
	// A round that outlasts it (a probe hanging for Timeout) skips ticks
	// rather than queueing them, so keep Timeout below Interval.
	Interval time.Duration
	// Timeout bounds each probe, from dialling to the end of the response;
	// 0 means 2 s.
	Timeout time.Duration
	// Rise is how many consecutive successful probes bring a Down target
	// Up; 0 means 2. From Unknown the first success is enough, so that
	// pdlb can route as soon as its first round has finished.
	Rise int
	// Fall is how many consecutive failed probes take an Up target Down;
	// 0 means 3. From Unknown the first failure is enough, so that a worker
	// that is down at startup gets no traffic.
	Fall int
	// Authorization, if set, is sent as the Authorization header of every
	// probe, for workers that need an API key on the probed path.
	Authorization string
	// TLSConfig configures the probes of TLS targets; nil means Go's
	// defaults.
	TLSConfig *tls.Config
	// Dial connects to a target's Addr; nil means TCP (IPv4 and IPv6) with
	// Timeout as the dial timeout. Tests set it to in-memory listeners.
	Dial fasthttp.DialFunc
	// Log receives one line per transition (info for Up, warn for Down)
	// and, at debug level, one per failed probe. NewChecker adds the field
	// component=health. The zero Logger discards everything.
	Log zerolog.Logger
}

// Checker probes a set of targets and tracks their States with rise and
// fall thresholds. Targets come with NewChecker, and join and leave with Add
// and Remove. Create it with NewChecker; the zero value is not usable. All
// its methods are safe for concurrent use. Rounds of probes, whether
// started by CheckOnce or by Run, never overlap: a round waits for the
// previous one to finish.
type Checker struct {
	cfg Config
	// targets is indexed by target index, nil where a target was removed;
	// replaced whole on every change (copy on write) under mu, so a round
	// and State read it without a lock.
	targets atomic.Pointer[[]*target]
	mu      sync.Mutex
	// round holds one token while a round is in progress; a channel rather
	// than a mutex so that CheckOnce can give up waiting when its context
	// ends.
	round chan struct{}

	ok, failed atomic.Uint64
}

// target is the Checker's state for one Target.
type target struct {
	Target
	uri string
	hc  *fasthttp.HostClient
	log zerolog.Logger

	state   atomic.Int32
	lastErr atomic.Pointer[string]
	// streak counts consecutive probe results that disagree with state;
	// starved is set while probes cannot be sent for want of resources.
	// Only the probe of the current round touches them, and rounds are
	// serialised, so they need no atomic.
	streak  int
	starved bool
	// removed is set by Remove: a probe of the round in flight then
	// reports nothing.
	removed atomic.Bool
}

// NewChecker returns a Checker for targets, which it copies; target i is
// the one State(i) and LastError(i) refer to. Every target starts Unknown.
// Nothing is probed until CheckOnce or Run is called.
func NewChecker(cfg Config, targets []Target) *Checker {
	cfg = cfg.withDefaults()
	cfg.Log = cfg.Log.With().Str("component", "health").Logger()
	c := &Checker{cfg: cfg, round: make(chan struct{}, 1)}
	all := make([]*target, len(targets))
	for i, t := range targets {
		all[i] = newTarget(t, &cfg)
	}
	c.targets.Store(&all)
	return c
}

// Add starts probing t from the next round, Unknown until then, and returns
// its index: the lowest index of a removed target, else the next one.
func (c *Checker) Add(t Target) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.targets.Load()
	i := slices.Index(old, nil)
	all := slices.Clone(old)
	if i < 0 {
		i = len(all)
		all = append(all, nil)
	}
	all[i] = newTarget(t, &c.cfg)
	c.targets.Store(&all)
	return i
}

// Remove stops probing target i and drops its idle connections; its
// index may be given to a later Add. A probe of it in flight finishes and
// reports nothing (no OnChange, no OnProbe) unless its result was being
// applied as Remove was called. It panics if i is not a
// target's index.
func (c *Checker) Remove(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := (*c.targets.Load())[i]
	if t == nil {
		panic("BUG: health: Remove of a removed target " + strconv.Itoa(i))
	}
	t.removed.Store(true)
	all := slices.Clone(*c.targets.Load())
	all[i] = nil
	c.targets.Store(&all)
	t.hc.CloseIdleConnections()
}

// removedTarget stands for a removed target: Unknown, no error.
var removedTarget = &target{}

// target returns target i, removedTarget if it was removed, and panics if i
// is out of range.
func (c *Checker) target(i int) *target {
	if t := (*c.targets.Load())[i]; t != nil {
		return t
	}
	return removedTarget
}

func (cfg Config) withDefaults() Config {
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Rise <= 0 {
		cfg.Rise = defaultRise
	}
	if cfg.Fall <= 0 {
		cfg.Fall = defaultFall
	}
	return cfg
}

func newTarget(t Target, cfg *Config) *target {
	if t.Path == "" {
		t.Path = defaultPath
	}
	scheme := "http://"
	if t.TLS {
		scheme = "https://"
	}
	return &target{
		Target: t,
		uri:    scheme + t.Addr + t.Path,
		// Separate from the request pools, so that a pool saturated by
		// long generations cannot make a busy worker look dead.
		hc: &fasthttp.HostClient{
			Addr:                      t.Addr,
			IsTLS:                     t.TLS,
			TLSConfig:                 cfg.TLSConfig,
			Name:                      "pdlb-health",
			Dial:                      cfg.Dial,
			DialDualStack:             true,
			MaxConns:                  2,
			MaxIdemponentCallAttempts: 1,
			ReadTimeout:               cfg.Timeout,
			WriteTimeout:              cfg.Timeout,
			MaxIdleConnDuration:       probeIdleTimeout,
			MaxResponseBodySize:       maxProbeBodySize,
		},
		log: cfg.Log.With().Str("target", t.Name).Str("addr", t.Addr).Logger(),
	}
}

// State returns what c knows of target i. It is lock-free, cheap enough
// for the request path; Unknown for a removed target, whose reader may have
// read its index before Remove. It panics if i is out of range.
func (c *Checker) State(i int) State {
	return State(c.target(i).state.Load())
}

// LastError returns why the most recent probe of target i failed, or ""
// if it succeeded, none has completed yet, or the target was removed. It
// panics if i is out of range.
func (c *Checker) LastError(i int) string {
	if p := c.target(i).lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Probes returns how many probes have succeeded and failed so far, summed
// over all targets, for metrics. Probes cut short because the round's
// context ended, and those pdlb lacked the resources to send
// (OutOfResources), are not counted.
func (c *Checker) Probes() (ok, failed uint64) {
	return c.ok.Load(), c.failed.Load()
}

// CheckOnce probes every target once, all at the same time, applies the
// results (calling OnChange on transitions) and returns when all are done,
// at most Timeout after the round starts. A round already in progress is
// waited for first. When ctx ends, CheckOnce stops waiting for its turn,
// each probe's deadline is the earlier of Timeout and ctx's deadline, and
// results that arrive after ctx ended are dropped rather than counted as
// failures: the caller's impatience says nothing about the target.
func (c *Checker) CheckOnce(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	select {
	case c.round <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-c.round }()

	var wg sync.WaitGroup
	for _, t := range *c.targets.Load() {
		if t != nil {
			wg.Go(func() { c.check(ctx, t) })
		}
	}
	wg.Wait()
}

// Run calls CheckOnce at once, then every Interval, until stop is closed.
// Closing stop cancels the round in progress, whose results are dropped;
// Run returns once its probes have finished (at most Timeout later), with
// no goroutine left behind and its idle probe connections closed.
func (c *Checker) Run(stop <-chan struct{}) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	c.run(stop, t.C)
}

// run is Run with the ticker injected, so tests can drive rounds.
func (c *Checker) run(stop <-chan struct{}, tick <-chan time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.loop(ctx, tick)
	}()
	<-stop
	cancel()
	<-done
	for _, t := range *c.targets.Load() {
		if t != nil {
			t.hc.CloseIdleConnections()
		}
	}
}

func (c *Checker) loop(ctx context.Context, tick <-chan time.Time) {
	for {
		c.CheckOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// check probes t once and applies the result unless ctx ended meanwhile,
// or pdlb lacked the resources to send the probe (OutOfResources): either
// way the result says nothing of t, whose state stays as it was.
func (c *Checker) check(ctx context.Context, t *target) {
	err := c.probe(ctx, t)
	if ended(ctx) || t.removed.Load() {
		return
	}
	if OutOfResources(err) {
		if !t.starved { // logged when it starts and ends, not every round
			t.log.Warn().Err(err).Msg("cannot probe: pdlb is out of resources; probes are not counted until it can")
		}
		t.starved = true
		return
	}
	if t.starved {
		t.starved = false
		t.log.Info().Msg("probing again")
	}
	c.apply(t, err)
}

// ended reports whether ctx is done or past its deadline. A probe cut
// short by ctx's deadline returns as soon as the deadline passes, which may
// be before ctx's own timer has marked it done.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// probe sends one GET to t and returns nil on a 200 response.
func (c *Checker) probe(ctx context.Context, t *target) error {
	deadline := time.Now().Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(t.uri)
	if c.cfg.Authorization != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, c.cfg.Authorization)
	}
	if err := t.hc.DoDeadline(req, resp, deadline); err != nil {
		return fmt.Errorf("cannot GET %s: %w", t.Path, err)
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return fmt.Errorf("GET %s returned status %d; want 200", t.Path, code)
	}
	return nil
}

// apply records the result of one probe of t and handles a transition.
func (c *Checker) apply(t *target, err error) {
	if err != nil {
		c.failed.Add(1)
		msg := err.Error()
		t.lastErr.Store(&msg)
		t.log.Debug().Err(err).Msg("health probe failed")
	} else {
		c.ok.Add(1)
		t.lastErr.Store(nil)
	}
	prev := State(t.state.Load())
	next, streak := step(prev, t.streak, err == nil, c.cfg.Rise, c.cfg.Fall)
	t.streak = streak
	if next != prev {
		t.state.Store(int32(next))
		if next == Up {
			t.log.Info().Stringer("from", prev).Msg("backend is up")
		} else {
			t.log.Warn().Stringer("from", prev).Err(err).Msg("backend is down")
		}
		if t.OnChange != nil {
			t.OnChange(next)
		}
	}
	if t.OnProbe != nil {
		t.OnProbe(err)
	}
}

// step returns the state after a probe result ok, given the current state s
// and streak, the number of consecutive earlier results that disagreed with
// s, and the new streak.
func step(s State, streak int, ok bool, rise, fall int) (State, int) {
	switch {
	case s == Unknown && ok:
		return Up, 0
	case s == Unknown:
		return Down, 0
	case (s == Up) == ok:
		return s, 0
	}
	streak++
	if ok && streak >= rise {
		return Up, 0
	}
	if !ok && streak >= fall {
		return Down, 0
	}
	return s, streak
}
