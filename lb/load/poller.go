package load

import (
	"context"
	"crypto/tls"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Defaults for the zero fields of Config.
const (
	defaultInterval = time.Second
	defaultTimeout  = time.Second
	defaultRecheck  = time.Minute
)

// Target is one worker whose load a Poller reads.
type Target struct {
	// Addr is the worker's host:port; it identifies the worker in Get,
	// Add and Remove.
	Addr string
	// TLS reads the load over HTTPS.
	TLS bool
	// Authorization, if set, is sent as the Authorization header, for
	// workers started with an API key.
	Authorization string
}

// Config tunes a Poller. The zero value polls no worker every second with
// a one-second timeout, over TCP, and logs nothing.
type Config struct {
	// Targets are the workers polled from the start; Add and Remove
	// change the set later.
	Targets []Target
	// Interval is the time between two rounds; 0 means 1 s. A round that
	// outlasts it skips ticks rather than queueing them.
	Interval time.Duration
	// Timeout bounds each worker's poll, from dialling to the end of the
	// answer, both routes included when the first answers 404; 0 means
	// 1 s. Keep it below Interval.
	Timeout time.Duration
	// Recheck is how long a worker found to answer only /get_load is read
	// there before /v1/loads is asked again, in case it was upgraded;
	// 0 means 1 min.
	Recheck time.Duration
	// Dial connects to a worker within the time it is given (what is
	// left of the poll's Timeout); nil means TCP (IPv4 and IPv6). Tests
	// set it to in-memory listeners.
	Dial fasthttp.DialFuncWithTimeout
	// TLSConfig configures the polls of TLS targets; nil means Go's
	// defaults.
	TLSConfig *tls.Config
	// Own, when set, counts the caller's own requests in flight on the
	// worker at addr, on its DP rank rank, or on all of it for rank -1.
	// It is read as each answer arrives (Snapshot.Own, Rank.Own): the load
	// a worker reports counts them too, and a caller that adds its count
	// now to what others had then (Snapshot.Others, RankOthers) is not
	// misled for a whole interval by requests of its own that have ended.
	Own func(addr string, rank int) int64
	// Log receives one line when a worker's load becomes known or
	// unknown, or its route changes, and, at debug level, one per failed
	// poll. New adds the field component=load.
	Log zerolog.Logger
}

func (cfg Config) withDefaults() Config {
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = defaultRecheck
	}
	return cfg
}

// Poller reads the load that each of a set of workers reports, in rounds,
// off the request path, and keeps the latest report of each for Get.
// Create it with New; the zero value is not usable. All its methods are
// safe for concurrent use. Rounds, whether started by PollOnce or by Run,
// never overlap, so each worker has at most one poll in flight.
type Poller struct {
	cfg Config
	// mu serialises Add and Remove, which publish a new map in workers;
	// readers load the map without locking.
	mu      sync.Mutex
	workers atomic.Pointer[map[string]*worker]
	// round holds one token while a round is in progress; a channel
	// rather than a mutex so that PollOnce can give up waiting.
	round chan struct{}
}

// New returns a Poller for cfg.Targets. Every worker's load is unknown
// until its first poll; nothing is polled until PollOnce or Run is called.
func New(cfg Config) *Poller {
	cfg = cfg.withDefaults()
	cfg.Log = cfg.Log.With().Str("component", "load").Logger()
	p := &Poller{cfg: cfg, round: make(chan struct{}, 1)}
	m := make(map[string]*worker, len(cfg.Targets))
	for _, t := range cfg.Targets {
		m[t.Addr] = newWorker(t, &p.cfg, time.Now())
	}
	p.workers.Store(&m)
	return p
}

// Get returns what p knows of the load of the worker at addr, or nil if p
// does not poll addr. It is lock-free, allocates nothing, and is cheap
// enough for the request path; the methods of a nil *Snapshot report an
// unknown load.
func (p *Poller) Get(addr string) *Snapshot {
	w := (*p.workers.Load())[addr]
	if w == nil {
		return nil
	}
	return w.snap.Load()
}

// Snapshots returns the latest snapshot of every worker, by address, for
// metrics and admin pages.
func (p *Poller) Snapshots() []*Snapshot {
	m := *p.workers.Load()
	out := make([]*Snapshot, 0, len(m))
	for _, w := range m {
		out = append(out, w.snap.Load())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// Add starts polling t from the next round; its load is unknown until
// then. Adding an address already polled replaces its target only if TLS
// or Authorization changed, and then its load is unknown again.
func (p *Poller) Add(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.workers.Load()
	if w := old[t.Addr]; w != nil && w.Target == t {
		return
	}
	m := make(map[string]*worker, len(old)+1)
	for addr, w := range old {
		m[addr] = w
	}
	if w := old[t.Addr]; w != nil {
		w.stop()
	}
	m[t.Addr] = newWorker(t, &p.cfg, time.Now())
	p.workers.Store(&m)
}

// Remove stops polling the worker at addr, if p polls it, and drops its
// idle connection. A poll of it in flight finishes, and is discarded.
func (p *Poller) Remove(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.workers.Load()
	w := old[addr]
	if w == nil {
		return
	}
	m := make(map[string]*worker, len(old))
	for a, x := range old {
		if a != addr {
			m[a] = x
		}
	}
	p.workers.Store(&m)
	w.stop()
}

// PollOnce polls every worker once, all at the same time, publishes the
// results and returns when all are done, at most Timeout after the round
// starts. A round already in progress is waited for first. When ctx ends,
// PollOnce stops waiting for its turn, each poll's deadline is the earlier
// of Timeout and ctx's deadline, and results that arrive after ctx ended
// are dropped: the caller's impatience says nothing of the worker.
func (p *Poller) PollOnce(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	select {
	case p.round <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.round }()

	var wg sync.WaitGroup
	for _, w := range *p.workers.Load() {
		wg.Go(func() { p.poll(ctx, w) })
	}
	wg.Wait()
}

// Run calls PollOnce at once, then every Interval, until stop is closed.
// Closing stop cancels the round in progress, whose results are dropped;
// Run returns once its polls have finished (at most Timeout later), with
// no goroutine left behind and its idle connections closed.
func (p *Poller) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.Interval)
		defer t.Stop()
		for {
			p.PollOnce(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	<-stop
	cancel()
	<-done
	for _, w := range *p.workers.Load() {
		w.hc.CloseIdleConnections()
	}
}

// poll reads w's load once and publishes it, unless ctx ended meanwhile.
func (p *Poller) poll(ctx context.Context, w *worker) {
	deadline := time.Now().Add(p.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ranks, route, err := w.read(deadline, p.cfg.Recheck)
	if ended(ctx) {
		return
	}
	var own int64
	if p.cfg.Own != nil {
		own = p.cfg.Own(w.Addr, -1)
		for i := range ranks {
			ranks[i].Own = p.cfg.Own(w.Addr, ranks[i].DPRank)
		}
	}
	w.publish(ranks, route, err, time.Now(), own)
	if w.stopped.Load() {
		w.hc.CloseIdleConnections() // Remove may have run before the dial
	}
}

// ended reports whether ctx is done or past its deadline. A poll cut short
// by ctx's deadline returns as soon as the deadline passes, which may be
// before ctx's own timer has marked it done.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
