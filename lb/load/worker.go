package load

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

const (
	// idleTimeout drops an idle connection before the worker does:
	// uvicorn, which serves SGLang, closes idle keep-alive connections
	// after 5 s.
	idleTimeout = 4 * time.Second
	// maxBodySize bounds an answer: a /v1/loads core section is about
	// 300 bytes per DP rank.
	maxBodySize = 1 << 20
)

// errNoRoute is the Err of a worker that answers 404 on both routes.
var errNoRoute = errors.New("worker answers neither " + pathLoads + " nor " + pathGetLoad + " (404): it reports no load")

// worker is a Poller's state for one Target.
type worker struct {
	Target
	scheme string
	hc     *fasthttp.HostClient
	log    zerolog.Logger

	snap    atomic.Pointer[Snapshot]
	stopped atomic.Bool

	// Only the poll of the current round touches these, and rounds are
	// serialised, so they need no lock.
	parser fastjson.Parser
	// preferGetLoad is set once the worker answered 404 on /v1/loads and
	// 200 on /get_load; loadsAskedAt is when /v1/loads was last asked.
	preferGetLoad bool
	loadsAskedAt  time.Time
}

func newWorker(t Target, cfg *Config, now time.Time) *worker {
	scheme := "http://"
	if t.TLS {
		scheme = "https://"
	}
	w := &worker{
		Target: t,
		scheme: scheme,
		// Its own small client, as health's probes have: a pool saturated
		// by long generations must not starve the load report.
		hc: &fasthttp.HostClient{
			Addr:                      t.Addr,
			IsTLS:                     t.TLS,
			TLSConfig:                 cfg.TLSConfig,
			Name:                      "pdlb-load",
			DialTimeout:               cfg.Dial,
			DialDualStack:             true,
			MaxConns:                  1, // one poll in flight at most
			MaxIdemponentCallAttempts: 1,
			ReadTimeout:               cfg.Timeout,
			WriteTimeout:              cfg.Timeout,
			MaxIdleConnDuration:       idleTimeout,
			MaxResponseBodySize:       maxBodySize,
		},
		log: cfg.Log.With().Str("addr", t.Addr).Logger(),
	}
	w.snap.Store(&Snapshot{Addr: t.Addr, Err: errNotPolled, Since: now})
	return w
}

// stop marks w removed and drops its idle connection.
func (w *worker) stop() {
	w.stopped.Store(true)
	w.hc.CloseIdleConnections()
}

// read asks w for its load by deadline: /v1/loads first, /get_load when
// /v1/loads answers 404, and /get_load first once the worker is known to
// answer only there, until recheck has passed since /v1/loads was last
// asked. A transport error or a status other than 404 ends the poll: it
// says nothing of which route the worker has.
func (w *worker) read(deadline time.Time, recheck time.Duration) ([]Rank, Route, error) {
	order := [2]Route{RouteLoads, RouteGetLoad}
	if w.preferGetLoad && time.Since(w.loadsAskedAt) < recheck {
		order = [2]Route{RouteGetLoad, RouteLoads}
	}
	for _, route := range order {
		if route == RouteLoads {
			w.loadsAskedAt = time.Now()
		}
		ranks, found, err := w.ask(route, deadline)
		if !found {
			continue
		}
		w.preferGetLoad = route == RouteGetLoad
		return ranks, route, err
	}
	w.preferGetLoad = false
	return nil, order[1], errNoRoute
}

// ask GETs route from w by deadline and reads its answer; found is false
// when the worker answered 404.
func (w *worker) ask(route Route, deadline time.Time) (ranks []Rank, found bool, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	uri := queryLoads
	if route == RouteGetLoad {
		uri = pathGetLoad
	}
	req.SetRequestURI(w.scheme + w.Addr + uri)
	if w.Authorization != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, w.Authorization)
	}
	if err := w.hc.DoDeadline(req, resp, deadline); err != nil {
		return nil, true, fmt.Errorf("cannot GET %s: %w", route, err)
	}
	switch code := resp.StatusCode(); code {
	case fasthttp.StatusOK:
	case fasthttp.StatusNotFound:
		return nil, false, nil
	default:
		return nil, true, fmt.Errorf("GET %s returned status %d; want 200", route, code)
	}
	if route == RouteGetLoad {
		ranks, err = readGetLoad(&w.parser, resp.Body())
	} else {
		ranks, err = readLoads(&w.parser, resp.Body())
	}
	return ranks, true, err
}

// publish stores the result of one poll (own: Config.Own then), keeping Since while the load
// stays known (or unknown), and logs transitions: to known, to unknown
// (the first failed poll of a new worker included), and a change of route.
func (w *worker) publish(ranks []Rank, route Route, err error, at time.Time, own int64) {
	prev := w.snap.Load()
	s := &Snapshot{Addr: w.Addr, Route: route, Err: err, At: at, Since: prev.Since, Own: own}
	if err == nil {
		s.Ranks = ranks
	}
	known := s.Known()
	switch {
	case known && !prev.Known():
		s.Since = at
		w.log.Info().Stringer("route", route).Int("ranks", len(ranks)).Msg("worker reports its load")
	case !known && prev.Known():
		s.Since = at
		fallthrough
	case !known && prev.Err == errNotPolled:
		w.log.Warn().Stringer("route", route).Err(err).Msg("worker load unknown; policies count pdlb's requests in flight")
	case known && route != prev.Route:
		w.log.Info().Stringer("route", route).Stringer("from", prev.Route).Msg("worker reports its load on another route")
	}
	if err != nil {
		w.log.Debug().Stringer("route", route).Err(err).Msg("load poll failed")
	}
	w.snap.Store(s)
}
