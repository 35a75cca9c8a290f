package fake

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The decode's prefill info cache, SGLang's prefill_info_table
// (disaggregation/decode.py: _resolve_prefill_dp_rank reads it,
// _ensure_prefill_info fills it). Each DP rank of a decode is its own
// scheduler process with its own KV manager, so each has its own table: on
// the first request a decode DP rank gets for a bootstrap address, that rank
// fetches the prefill's parallel info from its bootstrap server and keeps it.
// While the prefill is not fully registered (503, or nulls on the old API),
// or unreachable, the fetch is tried Config.InfoRetries times,
// Config.InfoRetryInterval apart, within the item's deadline; a failure is
// not cached, so the next request tries again. The rank keeps the info until
// its bootstrap server fails Config.HeartbeatMaxFailures health polls in a
// row (heartbeat.go). SGLang's first-request bug consults
// disagg_prefill_dp_rank before this cache (dp.go).

// The two forms of the parallel-info query: the current one, and SGLang's
// before 2026-02-23 (Config.OldBootstrapAPI).
const (
	routeInfoQuery    = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
	oldRouteInfoQuery = "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
)

// prefillInfo is what a decode keeps of a prefill's parallel info.
type prefillInfo struct {
	dpSize     int
	followRoom bool // follow_bootstrap_room; the old API implies it
	old        bool // answered the old /route API, whose rank queries differ
}

// infoEntry is a cached or in-flight fetch; ready is closed when info or
// err is set. lost is closed when the health polls drop the cached entry
// (heartbeat.go): the items that resolved their prefill DP rank with it and
// still wait for their KV then fail.
type infoEntry struct {
	ready chan struct{}
	lost  chan struct{}
	info  prefillInfo
	err   error
	// waited is closed once a request waits on another's fetch, so that a
	// test can wait for that moment instead of polling for it.
	waited     chan struct{}
	waitedOnce sync.Once
}

// infoCache maps canonical bootstrap addresses to their prefill info, and
// counts the consecutive failed health polls of each address
// (heartbeat.go).
type infoCache struct {
	mu    sync.RWMutex
	m     map[string]*infoEntry
	fails map[string]int // SGLang's heartbeat_failures; never reset by a drop
}

// errStopped ends a fetch whose call was aborted or whose server closed.
var errStopped = errors.New("request aborted or server closing")

// errNotRegistered is a prefill not fully registered yet.
var errNotRegistered = errors.New("prefill server not fully registered yet")

// prefillInfo returns the parallel info of the prefill at addr, from ic or
// fetched over n into ic, and the channel closed if the health polls drop
// it; concurrent first requests share one fetch. A fetch that stopped
// because the request that ran it was aborted is no answer for the others:
// they fetch again, as each of SGLang's requests would.
func (s *Server) prefillInfo(c *call, ic *infoCache, n *Network, addr string, deadline time.Time) (prefillInfo, <-chan struct{}, error) {
	for {
		e, owner := ic.entry(addr)
		if owner {
			s.fillInfo(c, ic, n, addr, e, deadline)
		} else {
			e.waitedOnce.Do(func() { close(e.waited) })
		}
		select {
		case <-e.ready:
			if !owner && errors.Is(e.err, errStopped) && !s.stopped(c) {
				continue
			}
			return e.info, e.lost, e.err
		case <-c.done:
		case <-s.quit:
		}
		return prefillInfo{}, nil, errStopped
	}
}

// entry returns the entry of addr, creating it if needed; owner is true for
// the caller that must fill it.
func (ic *infoCache) entry(addr string) (e *infoEntry, owner bool) {
	ic.mu.RLock()
	e = ic.m[addr]
	ic.mu.RUnlock()
	if e != nil {
		return e, false
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if e = ic.m[addr]; e != nil {
		return e, false
	}
	e = &infoEntry{ready: make(chan struct{}), lost: make(chan struct{}), waited: make(chan struct{})}
	ic.m[addr] = e
	return e, true
}

// cached reports whether the info of addr is in ic, fetched and kept: an
// entry still being fetched is not, as SGLang fills its table only once the
// fetch is done.
func (ic *infoCache) cached(addr string) bool {
	ic.mu.RLock()
	e := ic.m[addr]
	ic.mu.RUnlock()
	return e.kept()
}

// kept reports whether e holds fetched info; e may be nil.
func (e *infoEntry) kept() bool {
	if e == nil {
		return false
	}
	select {
	case <-e.ready:
		return e.err == nil
	default:
		return false
	}
}

// fillInfo fetches into e and publishes it; a failed entry is dropped.
func (s *Server) fillInfo(c *call, ic *infoCache, n *Network, addr string, e *infoEntry, deadline time.Time) {
	e.info, e.err = s.fetchPrefillInfo(c, n, addr, deadline)
	if e.err == nil {
		s.st.prefillInfoFetch.Add(1)
		s.startHeartbeat()
	} else {
		ic.mu.Lock()
		if ic.m[addr] == e {
			delete(ic.m, addr)
		}
		ic.mu.Unlock()
	}
	close(e.ready)
}

// fetchPrefillInfo asks the bootstrap server at addr until it answers or
// the deadline passes. A 400 to the current query means an old server (or
// a new one to the old query): the other form is tried next.
func (s *Server) fetchPrefillInfo(c *call, n *Network, addr string, deadline time.Time) (prefillInfo, error) {
	old := false
	for try := 1; ; try++ {
		info, status, err := s.getPrefillInfo(c, n, addr, old, deadline)
		if err == nil {
			return info, nil
		}
		if s.stopped(c) {
			return prefillInfo{}, errStopped
		}
		if errors.Is(err, errNoNetwork) {
			return prefillInfo{}, err
		}
		if status == fasthttp.StatusBadRequest {
			old = !old
			if old {
				try--
				continue // try the old form at once, as the same try
			}
		}
		if try >= s.cfg.InfoRetries || time.Until(deadline) < s.cfg.InfoRetryInterval {
			return prefillInfo{}, fmt.Errorf("cannot fetch prefill parallel info from %s after %d tries: %w", addr, try, err)
		}
		if !s.pause(c, s.cfg.InfoRetryInterval) {
			return prefillInfo{}, errStopped
		}
	}
}

// getPrefillInfo asks once; status is the HTTP status, 0 when none came.
func (s *Server) getPrefillInfo(c *call, n *Network, addr string, old bool, deadline time.Time) (prefillInfo, int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	query := routeInfoQuery
	if old {
		query = oldRouteInfoQuery
	}
	req.SetRequestURI("http://" + addr + query)
	if err := s.bootstrapCall(c, nil, n, addr, req, resp, deadline); err != nil {
		return prefillInfo{}, 0, err
	}
	status := resp.StatusCode()
	if status != fasthttp.StatusOK {
		return prefillInfo{}, status, fmt.Errorf("bootstrap server answered %d: %q", status, resp.Body())
	}
	info, err := s.parsePrefillInfo(resp.Body(), old)
	return info, status, err
}

// parsePrefillInfo reads a parallel info answer of either API.
func (s *Server) parsePrefillInfo(body []byte, old bool) (prefillInfo, error) {
	p := s.parsers.Get()
	defer s.parsers.Put(p)
	v, err := loadJSON(p, body)
	if err != nil {
		return prefillInfo{}, fmt.Errorf("cannot parse prefill parallel info: %w", err)
	}
	if old {
		d := v.Get("prefill_dp_size")
		if d == nil || d.Type() != fastjson.TypeNumber {
			return prefillInfo{}, errNotRegistered
		}
		return prefillInfo{dpSize: max(d.GetInt(), 1), followRoom: true, old: true}, nil
	}
	d := v.GetInt("dp_size")
	if d < 1 {
		return prefillInfo{}, fmt.Errorf("bad dp_size in prefill parallel info: %q", body)
	}
	return prefillInfo{dpSize: d, followRoom: v.GetBool("follow_bootstrap_room")}, nil
}
