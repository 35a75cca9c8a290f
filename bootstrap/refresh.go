package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// maxServerInfoSize bounds a prefill's /server_info answer, which lists one
// internal state per DP rank.
const maxServerInfoSize = 4 << 20

// fetched is what one refresh learned; port is 0 when it failed before
// knowing the port.
type fetched struct {
	port   int
	source string
	info   Info
	ranks  []Rank
}

// refresh is Refresh for t.
func (r *Registry) refresh(ctx context.Context, t *target) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.refreshLocked(ctx, t)
}

// refreshLocked refreshes t, whose mu the caller holds.
func (r *Registry) refreshLocked(ctx context.Context, t *target) error {
	t.refreshes.Inc()
	f, err := r.fetch(ctx, t)
	if err != nil {
		t.failures.Inc()
		if ctx.Err() != nil || r.cfg.Inconclusive != nil && r.cfg.Inconclusive(err) {
			return err
		}
	}
	prev := t.state.Load()
	st := nextState(prev, f, err)
	st.Updated = r.cfg.Now()
	r.publish(t, prev, st)
	return err
}

// fetch learns t's port if needed, then asks its bootstrap server. Every
// fetch ends with no idle connection to the bootstrap server: one kept until
// the next refresh may have died with a restarted prefill, and calls are
// not retried, so the refresh would fail for nothing.
func (r *Registry) fetch(ctx context.Context, t *target) (fetched, error) {
	var f fetched
	var err error
	if f.port, f.source, err = r.port(ctx, t); err != nil {
		return f, err
	}
	c := r.clientFor(t, net.JoinHostPort(t.host, strconv.Itoa(f.port)))
	defer c.CloseIdleConnections()
	if f.info, err = c.Info(ctx); err == nil {
		f.ranks, err = c.Ranks(ctx, f.info)
	}
	if err != nil && !errors.Is(err, ErrNotRegistered) && ctx.Err() == nil {
		// The prefill may come back on another port: ask /server_info
		// again. A prefill that answers "not registered" is where we
		// looked.
		t.learned, t.learnedFrom = 0, ""
	}
	return f, err
}

// port returns t's bootstrap port and where it came from, asking the
// prefill's /server_info when neither the command line nor an earlier
// refresh gave it.
func (r *Registry) port(ctx context.Context, t *target) (int, string, error) {
	if given := int(t.port.Load()); given != t.given {
		t.given, t.learned, t.learnedFrom = given, 0, "" // SetPort
	}
	if t.given > 0 {
		return t.given, PortFromCLI, nil
	}
	if t.learned > 0 {
		return t.learned, t.learnedFrom, nil
	}
	port, err := r.askPort(ctx, t)
	if err != nil {
		return 0, "", err
	}
	t.learned, t.learnedFrom = port, PortFromServerInfo
	if port == 0 {
		t.learned, t.learnedFrom = DefaultPort, PortDefault
	}
	return t.learned, t.learnedFrom, nil
}

// askPort reads disaggregation_bootstrap_port from t's /server_info: 0 when
// the prefill answers without a valid one, or has no such route (404), or
// no APIAddr is known.
func (r *Registry) askPort(ctx context.Context, t *target) (int, error) {
	if t.api == nil {
		return 0, nil
	}
	status, body, err := doGet(ctx, t.api, r.cfg.Timeout, "/server_info", r.cfg.Authorization)
	// /server_info is asked rarely: leave no connection to go stale.
	t.api.CloseIdleConnections()
	switch {
	case err != nil:
		return 0, fmt.Errorf("cannot read /server_info of prefill %s: %w", t.cfg.APIAddr, err)
	case status == fasthttp.StatusNotFound:
		return 0, nil
	case status != fasthttp.StatusOK:
		return 0, fmt.Errorf("cannot read /server_info of prefill %s: answered %d %q", t.cfg.APIAddr, status, clip(body))
	}
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return 0, fmt.Errorf("cannot parse /server_info of prefill %s: %w", t.cfg.APIAddr, err)
	}
	if p := v.GetInt("disaggregation_bootstrap_port"); p > 0 && p <= 65535 {
		return p, nil
	}
	return 0, nil
}

// clientFor returns t's Client for the bootstrap server at addr, replacing
// the one of another address.
func (r *Registry) clientFor(t *target, addr string) *Client {
	if t.client != nil && t.client.Addr() == addr {
		return t.client
	}
	if t.client != nil {
		t.client.CloseIdleConnections()
	}
	t.client = NewClient(addr, r.cfg.Dial, r.cfg.Timeout)
	return t.client
}

// nextState is the State that follows prev after a refresh that fetched f,
// or failed with err. A failed refresh keeps the last Info and Ranks, and
// the last port when it failed before knowing one.
func nextState(prev *State, f fetched, err error) *State {
	st := &State{
		Port:       prev.Port,
		PortSource: prev.PortSource,
		Info:       prev.Info,
		Ranks:      prev.Ranks,
		Generation: prev.Generation,
		next:       make(chan struct{}),
	}
	if f.port > 0 {
		st.Port, st.PortSource = f.port, f.source
	}
	if err != nil {
		st.Err = err.Error()
	} else {
		st.Ready, st.Info, st.Ranks = true, f.info, f.ranks
	}
	if st.Ready != prev.Ready || st.Port != prev.Port || st.Info != prev.Info || !slices.Equal(st.Ranks, prev.Ranks) {
		st.Generation++
	}
	return st
}

// publish makes st t's State, wakes the waiters of prev, logs a transition
// and calls OnChange. t.mu is held, so publications of t are ordered.
func (r *Registry) publish(t *target, prev, st *State) {
	t.state.Store(st)
	close(prev.next)
	t.logTransition(prev, st)
	// The first refresh is news too: a target that has never been ready
	// is now known not to be.
	if (st.Generation != prev.Generation || prev.Updated.IsZero()) && r.cfg.OnChange != nil && !t.removed() {
		r.cfg.OnChange(t.i, st)
	}
}

// logTransition logs what changed from prev to st: becoming ready or
// changing while ready at info, becoming not ready at warn, the first
// failure after startup at info (a prefill still starting is normal), and
// further failures at debug only.
func (t *target) logTransition(prev, st *State) {
	switch {
	case st.Ready && !prev.Ready:
		t.logReady(st, "prefill bootstrap server is ready")
	case st.Ready && st.Generation != prev.Generation:
		t.logReady(st, "prefill parallel info changed")
	case st.Ready:
	case prev.Ready:
		t.log.Warn().Str("error", st.Err).Uint64("generation", st.Generation).
			Msg("prefill bootstrap server is not ready")
	case prev.Updated.IsZero():
		t.log.Info().Str("error", st.Err).Msg("waiting for the prefill bootstrap server")
	default:
		t.log.Debug().Str("error", st.Err).Msg("prefill bootstrap server still not ready")
	}
}

func (t *target) logReady(st *State, msg string) {
	t.log.Info().
		Str("bootstrap", net.JoinHostPort(t.host, strconv.Itoa(st.Port))).
		Int("port", st.Port).
		Str("port_source", st.PortSource).
		Int("dp_size", st.Info.DPSize).
		Int("attn_tp_size", st.Info.AttnTPSize).
		Int("attn_cp_size", st.Info.AttnCPSize).
		Int("pp_size", st.Info.PPSize).
		Int("page_size", st.Info.PageSize).
		Bool("follow_bootstrap_room", st.Info.FollowBootstrapRoom).
		Str("kv_cache_dtype", st.Info.KVCacheDType).
		Bool("legacy_api", st.Info.Legacy).
		Int("ranks", len(st.Ranks)).
		Uint64("generation", st.Generation).
		Msg(msg)
}
