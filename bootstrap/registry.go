package bootstrap

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// DefaultPort is SGLang's default --disaggregation-bootstrap-port: the port
// of a prefill that was given none and reports none.
const DefaultPort = 8998

// The values of State.PortSource.
const (
	PortFromCLI        = "cli"         // Target.Port
	PortFromServerInfo = "server_info" // the prefill's /server_info
	PortDefault        = "default"     // DefaultPort
)

// Defaults for zero Config fields.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultRefreshInterval = 5 * time.Second
	DefaultRetryMin        = 200 * time.Millisecond
	DefaultRetryMax        = 5 * time.Second
)

// Target is one prefill the registry follows.
type Target struct {
	// APIAddr is host:port of the prefill's HTTP API, asked for
	// /server_info when Port is 0. It names the prefill in logs and
	// metrics. Empty means the port cannot be asked: DefaultPort is used.
	APIAddr string
	// Host is the host to reach the prefill's bootstrap server at: the
	// prefill URL's host, with or without IPv6 brackets. Empty means the
	// host of APIAddr.
	Host string
	// Port is the bootstrap port given on the command line; 0 means
	// unknown: asked from /server_info, else DefaultPort.
	Port int
	// TLS asks APIAddr over https (the bootstrap server speaks http).
	TLS bool
}

// Config configures a Registry. NewRegistry copies it; zero fields get
// the documented defaults.
type Config struct {
	// Targets are the prefills to follow from the start, at indices 0 to
	// len(Targets)-1 of the Registry's methods; Add follows more.
	Targets []Target
	// Dial connects to an address ("host:port"). Nil means TCP, over IPv4
	// and IPv6.
	Dial fasthttp.DialFunc
	// Timeout bounds each HTTP call. Zero means DefaultTimeout.
	Timeout time.Duration
	// Authorization, if set, is sent as the Authorization header of the
	// calls to a prefill's API (/server_info), for workers that need an
	// API key; bootstrap servers take none.
	Authorization string
	// APITLS configures the calls to prefill APIs over https; nil means
	// Go's defaults.
	APITLS *tls.Config
	// RefreshInterval is how often Run refreshes a ready target, to notice
	// a prefill that went away or changed. Zero means
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// RetryMin and RetryMax bound how often Run retries a target that is
	// not ready: RetryMin after the first failure, doubling up to RetryMax.
	// Zero means DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// Inconclusive, if not nil, reports whether a refresh's error says
	// nothing of the prefill: pdlb's own lack of file descriptors, say
	// (lb passes health.OutOfResources). Such a refresh publishes nothing,
	// as one cut short by its context does, so the prefill keeps its
	// State. Nil means every failure counts.
	Inconclusive func(error) bool
	// OnChange, if not nil, is called after target i's first refresh and
	// whenever its State got a new Generation, with that State, on the goroutine that refreshed it
	// (Run's, or Refresh's caller). Calls for one target never overlap and
	// come in Generation order; calls for different targets may overlap.
	// It must not call Refresh for the same target, which would deadlock.
	OnChange func(i int, st *State)
	// Metrics receives the registry's metrics, labelled by
	// prefill="<APIAddr>": pdlb_bootstrap_ready (1 when Ready, else 0),
	// pdlb_bootstrap_dp_size (the last known dp_size, 0 before the first
	// ready refresh), pdlb_bootstrap_refreshes_total and
	// pdlb_bootstrap_refresh_failures_total. Targets sharing an APIAddr
	// share them; Remove unregisters them with the last of those. Nil
	// means none are exported.
	Metrics *metrics.Set
	// Log receives state transitions (info, warn) and failed retries
	// (debug). The zero value discards them.
	Log zerolog.Logger
	// Now stamps State.Updated. Nil means time.Now. Backoff and HTTP
	// timeouts use real time.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.RetryMin <= 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet() // private: saves a nil check per update
	}
	return c
}

// State is an immutable snapshot of what the registry knows about one
// prefill. Never modify one: it is shared by every reader.
type State struct {
	// Ready is true when the bootstrap server answered the last refresh
	// with the parallel info and every rank address.
	Ready bool
	// Port is the bootstrap port in use, or last tried; 0 while unknown.
	Port int
	// PortSource is where Port came from: PortFromCLI, PortFromServerInfo
	// or PortDefault; "" while Port is 0.
	PortSource string
	// Info and Ranks are the last ones fetched: current when Ready, and
	// possibly stale or zero when not.
	Info  Info
	Ranks []Rank
	// Err is why the target is not ready: the last refresh's error, or
	// "not refreshed yet". It is "" when Ready.
	Err string
	// Generation increases every time Ready, Port, Info or Ranks change:
	// a caller that acted on one Generation (decodes warmed against these
	// ranks) must act again on a greater one. It is 0 before any change.
	Generation uint64
	// Updated is when the last refresh ended; zero before the first one.
	Updated time.Time

	next chan struct{} // closed when a newer State replaces this one
}

// Registry follows the bootstrap servers of a set of prefills: it learns
// each one's bootstrap port, parallel info and rank addresses, and keeps
// them fresh (see the package documentation, The registry). Create it with
// NewRegistry; the set changes with Add and Remove (registry_targets.go).
// All methods are safe for concurrent use. Methods taking a target index i
// panic unless Config.Targets or Add gave i; a removed index answers as a
// target that is not ready and never will be.
type Registry struct {
	cfg Config
	// targets are the targets by index, nil where one was removed:
	// replaced whole on every change (copy on write, under mu), read
	// without a lock.
	targets atomic.Pointer[[]*target]
	// removed is the State of every removed index.
	removed *State

	mu sync.Mutex // serialises Add, Remove and Run's start and end; guards the fields below
	// running are Run's loops; nil while Run does not run.
	running *loops
	// series are the metric series by label, shared by the targets of one
	// APIAddr.
	series map[string]*labelSeries
}

// target is the registry's view of one prefill.
type target struct {
	i         int
	cfg       Target
	host      string // of the bootstrap server, without brackets
	log       zerolog.Logger
	api       *fasthttp.HostClient // nil when APIAddr is empty
	state     atomic.Pointer[State]
	poke      chan struct{} // buffered: a pending Poke
	refreshes *metrics.Counter
	failures  *metrics.Counter
	label     string        // of its metric series
	port      atomic.Int32  // the port given: Target.Port, or SetPort's
	gone      chan struct{} // closed by Remove
	stop      func()        // ends its loop in Run; nil if none runs; guarded by Registry.mu

	mu          sync.Mutex // serialises refreshes; guards the fields below
	client      *Client    // of the bootstrap server last tried
	given       int        // the port given as the last refresh began
	learned     int        // port from /server_info or DefaultPort; 0 = ask again
	learnedFrom string
}

// NewRegistry returns a Registry following cfg.Targets, each not ready
// until its first refresh. It contacts nothing: call Run, or Refresh.
func NewRegistry(cfg Config) *Registry {
	cfg = cfg.withDefaults()
	r := &Registry{
		cfg:     cfg,
		removed: &State{Err: "prefill removed from the registry", next: make(chan struct{})},
		series:  map[string]*labelSeries{},
	}
	all := make([]*target, len(cfg.Targets))
	for i, tc := range cfg.Targets {
		all[i] = r.newTarget(i, tc)
	}
	r.targets.Store(&all)
	return r
}

func (r *Registry) newTarget(i int, tc Target) *target {
	t := &target{i: i, cfg: tc, poke: make(chan struct{}, 1), gone: make(chan struct{}), given: tc.Port}
	t.port.Store(int32(tc.Port))
	t.host = strings.TrimSuffix(strings.TrimPrefix(tc.Host, "["), "]")
	if t.host == "" {
		t.host, _, _ = net.SplitHostPort(tc.APIAddr)
	}
	t.log = r.cfg.Log.With().Str("prefill", tc.APIAddr).Logger()
	if tc.APIAddr != "" {
		t.api = &fasthttp.HostClient{
			Addr:                      tc.APIAddr,
			Name:                      "pdlb",
			IsTLS:                     tc.TLS,
			TLSConfig:                 r.cfg.APITLS,
			Dial:                      r.cfg.Dial,
			DialDualStack:             true,
			MaxConns:                  1,
			MaxConnWaitTimeout:        r.cfg.Timeout,
			MaxIdemponentCallAttempts: 1,
			MaxResponseBodySize:       maxServerInfoSize,
		}
	}
	st := &State{Err: "not refreshed yet", next: make(chan struct{})}
	if tc.Port > 0 {
		st.Port, st.PortSource = tc.Port, PortFromCLI
	}
	t.state.Store(st)
	r.registerMetrics(t)
	return t
}

// escapeLabel escapes a Prometheus label value.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// State returns the latest snapshot of target i, never nil. It takes no
// lock and does not allocate, so the request path may call it.
func (r *Registry) State(i int) *State {
	if t := r.target(i); t != nil {
		return t.state.Load()
	}
	return r.removed
}

// Snapshot returns the latest State of every index, in index order, the
// removed ones' included.
func (r *Registry) Snapshot() []*State {
	targets := *r.targets.Load()
	all := make([]*State, len(targets))
	for i := range targets {
		all[i] = r.State(i)
	}
	return all
}

// Refresh refreshes target i once, synchronously: it learns the port if
// needed, then fetches the parallel info and every rank address, and
// publishes the resulting State. It returns the refresh's error, nil when
// the target is ready. A refresh that fails because ctx ended, or
// inconclusively (Config.Inconclusive), publishes nothing: it says nothing
// about the prefill. Refreshes of one target are
// serialised; a call in flight ends by ctx's deadline or Config.Timeout.
func (r *Registry) Refresh(ctx context.Context, i int) error {
	t := r.target(i)
	if t == nil {
		return ErrRemoved
	}
	return r.refresh(ctx, t)
}

// Recheck refreshes target i as Refresh does, unless a State newer than
// seen has been published since: it is for a caller that found the State
// it read wrong (a prefill refused a DP rank that State gave it), so that
// the many callers who find the same State wrong at once cause one
// refresh, and none of them acts on that State again. Every refresh
// publishes a State, changed or not, so callers queued behind one do not
// refresh again.
func (r *Registry) Recheck(ctx context.Context, i int, seen *State) error {
	t := r.target(i)
	if t == nil {
		return ErrRemoved
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state.Load() != seen {
		return nil
	}
	return r.refreshLocked(ctx, t)
}

// Poke asks Run to refresh target i now, for example after a request to it
// failed. It never blocks; pokes made while one is pending merge, and a
// poke made while Run is not running waits for it. A removed target's
// poke does nothing.
func (r *Registry) Poke(i int) {
	t := r.target(i)
	if t == nil {
		return
	}
	select {
	case t.poke <- struct{}{}:
	default:
	}
}

// WaitReady returns target i's State as soon as it is ready, at once if it
// already is. When ctx ends first it returns the latest State, not ready,
// and an error wrapping ctx.Err() with the target's last error. It wakes
// only when a new State is published; any number may wait. For a target
// removed, before or while it waits, it returns the removed State and an
// error wrapping ErrRemoved at once.
func (r *Registry) WaitReady(ctx context.Context, i int) (*State, error) {
	t := r.target(i)
	if t == nil {
		return r.removed, fmt.Errorf("prefill target %d: %w", i, ErrRemoved)
	}
	for {
		st := t.state.Load()
		if st.Ready {
			return st, nil
		}
		select {
		case <-st.next:
		case <-t.gone:
			return r.removed, fmt.Errorf("prefill %s: %w", t.cfg.APIAddr, ErrRemoved)
		case <-ctx.Done():
			st = t.state.Load()
			if st.Ready {
				return st, nil
			}
			return st, fmt.Errorf("prefill %s is not ready (%s): %w", t.cfg.APIAddr, st.Err, ctx.Err())
		}
	}
}

// Run refreshes every target at once, then every RefreshInterval while it
// is ready, or with backoff from RetryMin to RetryMax while it is not, and
// at once when poked. It returns once stop is closed and every refresh it
// started has ended (at most Config.Timeout later), leaving no goroutine
// and no idle connection behind. A target added while it runs is followed
// from then on, refreshed at once; a target removed is followed no more.
// Call it at most once at a time.
func (r *Registry) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	run := &loops{ctx: ctx}
	r.mu.Lock()
	r.running = run
	for _, t := range *r.targets.Load() {
		if t != nil {
			r.startLoop(t)
		}
	}
	r.mu.Unlock()
	<-stop
	r.mu.Lock()
	r.running = nil // Add starts no loop from here on
	r.mu.Unlock()
	cancel()
	run.wg.Wait()
	for _, t := range *r.targets.Load() {
		if t != nil {
			t.closeIdleConnections()
		}
	}
}

// follow is Run's loop for one target.
func (r *Registry) follow(ctx context.Context, t *target) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	retry := r.cfg.RetryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-t.poke:
		}
		wait := r.cfg.RefreshInterval
		if err := r.refresh(ctx, t); err != nil {
			// The error is in the State, and logged on transitions.
			wait, retry = retry, min(2*retry, r.cfg.RetryMax)
		} else {
			retry = r.cfg.RetryMin
		}
		timer.Reset(wait)
	}
}

func (t *target) closeIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client != nil {
		t.client.CloseIdleConnections()
	}
	if t.api != nil {
		t.api.CloseIdleConnections()
	}
}
