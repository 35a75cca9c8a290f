package fake

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Faults on command: Server.SetFault makes a running server fail one way
// until the fault is replaced, so fault-injection and soak tests can break
// a worker at any moment and heal it again. Faults act on the HTTP API's
// generate routes (/generate, /v1/completions, /v1/chat/completions), and on
// /health and /health_generate where Fault.Health says so; FaultRefuse takes
// the whole HTTP API away. The other routes answer as usual, and a prefill's
// bootstrap server has its own switch, SetBootstrapDown.

// FaultKind is a way a Server fails on command.
type FaultKind uint8

const (
	// FaultNone is a healthy server: the zero Fault.
	FaultNone FaultKind = iota

	// FaultRefuse takes the HTTP API away, as when the worker process is
	// killed: its listener is closed, so a dial fails as a refused one
	// does (ECONNREFUSED on an in-memory Network, a closed port on TCP),
	// and every connection it has is closed at once, idle or serving.
	// Requests in flight are aborted (their KV waits end) and their clients
	// get no more bytes. Any other fault listens again on the same address.
	FaultRefuse

	// FaultError answers generate requests at once, streamed or not and
	// whatever their body, with Fault.Status and the body SGLang's
	// HTTPException handler writes for a 5xx on every route (in
	// entrypoints/http_server.py): {"object":"error","message":Message,
	// "type":"<Status>","param":null,"code":Status}. With Fault.Health,
	// /health and /health_generate answer 503 with an empty body, as
	// SGLang's health check does when it fails (it knows no other error
	// status).
	FaultError

	// FaultHang holds generate requests arriving while it is set before
	// their first byte: no status line, no header, no work (no KV wait,
	// not in Stats.InFlight). A held request goes on as any other once the
	// fault is replaced (served, or meeting the new fault); if its client
	// closes the connection first it ends (Stats.ClientGone), and if the
	// server closes first its connection is cut. With Fault.Health, health
	// checks are held the same way.
	FaultHang

	// FaultCut breaks a streamed generate request after Fault.Events SSE
	// events (events of any kind, [DONE] included): its connection is
	// closed abruptly, with no further event, no [DONE] and no chunked
	// terminator. A stream already past that many events when the fault is
	// set is cut before its next one. A non-stream request does its work
	// (KV transfer, generation), then has its connection closed before any
	// byte of its answer, as a worker dying mid-generation leaves it:
	// Events does not apply to it.
	FaultCut

	// FaultStall holds a streamed generate request after Fault.Events SSE
	// events, its connection open and silent, until the fault is replaced
	// (then the stream goes on, or meets the new fault); if the request is
	// aborted (its client going away, /abort_request) or the server closes
	// first, it goes on as an aborted stream does. A non-stream request
	// does its work, then holds its answer the same way.
	FaultStall

	faultKinds // the number of kinds
)

var faultNames = [faultKinds]string{"none", "refuse", "error", "hang", "cut", "stall"}

// String returns the kind's lower-case name, as in logs.
func (k FaultKind) String() string {
	if k < faultKinds {
		return faultNames[k]
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is a way to fail, set with Server.SetFault. The zero Fault is a
// healthy server. Fields a Kind does not use are ignored.
type Fault struct {
	// Kind is the way to fail.
	Kind FaultKind

	// Status is FaultError's HTTP status, 400 to 599. Zero means 500.
	Status int

	// Message is FaultError's error message. Empty means the status's
	// reason phrase, as "Internal Server Error".
	Message string

	// Events is how many SSE events a stream sends before FaultCut or
	// FaultStall acts. Zero means 1; a negative value means none: the
	// stream gets its header only.
	Events int

	// Health makes FaultError and FaultHang act on /health and
	// /health_generate too, so active health checks see them. False leaves
	// health checks healthy (StartDelay still applies).
	Health bool
}

func (f Fault) status() int {
	if f.Status == 0 {
		return fasthttp.StatusInternalServerError
	}
	return f.Status
}

func (f Fault) events() int {
	switch {
	case f.Events == 0:
		return 1
	case f.Events < 0:
		return 0
	}
	return f.Events
}

func (f Fault) validate() error {
	if f.Kind >= faultKinds {
		return fmt.Errorf("cannot set fault: unknown kind %d", f.Kind)
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return fmt.Errorf("cannot set fault: status %d is not an error status (400 to 599)", f.Status)
	}
	return nil
}

// faultState is a fault as set; changed is closed when it is replaced, so
// that held requests look again.
type faultState struct {
	f       Fault
	changed chan struct{}
}

// SetFault makes the server fail as f says from now on, until the next
// SetFault; the zero Fault heals it. Requests already held (FaultHang,
// FaultStall) look at the new fault at once. It is safe for concurrent use,
// at any time. FaultRefuse needs a server started with Start; leaving it
// listens again on the same address, which may fail on TCP if the port was
// taken meanwhile: the server then keeps refusing and the error says so. On
// a closed server SetFault does nothing and returns nil. An unknown Kind or
// a Status out of 400 to 599 is an error.
func (s *Server) SetFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.api == nil && f.Kind == FaultRefuse {
		return errors.New("cannot refuse connections: the server was not started")
	}
	var err error
	if s.api != nil {
		err = s.setRefusing(s.api, f.Kind == FaultRefuse)
	}
	if err != nil && f.Kind != FaultRefuse {
		return err
	}
	old := s.faults.Swap(&faultState{f: f, changed: make(chan struct{})})
	close(old.changed)
	return err
}

// Fault returns the fault set, the zero Fault when healthy.
func (s *Server) Fault() Fault { return s.faults.Load().f }

// SetBootstrapDown makes a started prefill's bootstrap server refuse
// connections as FaultRefuse does the HTTP API (down true: listener and
// connections closed), or listen again on the same address (down false).
// Decodes then fail to fetch the prefill's parallel info, as SGLang's do;
// decode DP ranks that cached it before still meet the prefill, as SGLang's
// do until their bootstrap health polls give up (Config.HeartbeatMaxFailures
// in a row, heartbeat.go): then they drop the info and fail the items
// waiting on it. It is safe for concurrent
// use; on a closed server it does nothing and returns nil. It fails on a
// server that is not a started prefill, or when listening again fails.
func (s *Server) SetBootstrapDown(down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.boot == nil {
		return errors.New("cannot switch the bootstrap server: not a started prefill")
	}
	return s.setRefusing(s.boot, down)
}

// CloseIdleConnections closes every HTTP API connection not serving a
// request, as SGLang's uvicorn drops a keep-alive connection idle for about
// 5 s (its timeout_keep_alive), but now: a load balancer's next request on
// one of them fails before any answer, as it does on a pooled connection the
// worker dropped. Connections serving a request (a handler or a stream
// running) are left alone, and stay open after their answer. A connection
// whose answer is out but not yet reported idle by fasthttp is closed as
// soon as it is, before it can read another request, so a client that has
// read its answer always finds its connection closed. It returns how many
// connections it closed or marked so, 0 before Start. Config.IdleTimeout
// still applies. It is safe for concurrent use.
func (s *Server) CloseIdleConnections() int {
	s.mu.Lock()
	api := s.api
	s.mu.Unlock()
	if api == nil {
		return 0
	}
	return api.conns.closeIdle()
}

// injected counts a fault acting on a request and tells Config.OnFault.
func (s *Server) injected(k FaultKind) {
	s.st.faultsInjected.Add(1)
	if h := s.cfg.OnFault; h != nil {
		h(k)
	}
}

// admit meets the faults a generate request meets on arrival: FaultHang
// holds it, then FaultError answers it. It reports whether to serve it.
func (s *Server) admit(ctx *fasthttp.RequestCtx, c *call) bool {
	if !s.hang(c, false) {
		if c.gone.Load() {
			s.clientGone("")
		}
		cutConn(ctx.Conn())
		return false
	}
	f := s.faults.Load().f
	if f.Kind != FaultError {
		return true
	}
	s.injected(FaultError)
	msg := f.Message
	if msg == "" {
		msg = fasthttp.StatusMessage(f.status())
	}
	writeJSON(ctx, f.status(), appendOpenAIError(nil, f.status(), strconv.Itoa(f.status()), msg))
	return false
}

// healthFault meets a fault marked Health on a health check: FaultHang
// holds it, then FaultError answers 503. It reports whether to answer as
// usual.
func (s *Server) healthFault(ctx *fasthttp.RequestCtx) bool {
	if f := s.Fault(); f.Kind == FaultHang && f.Health {
		c := newCall()
		w := s.watch(ctx.Conn(), c)
		ok := s.hang(c, true)
		w.unwatch()
		if !ok {
			cutConn(ctx.Conn())
			return false
		}
	}
	if f := s.Fault(); f.Kind != FaultError || !f.Health {
		return true
	}
	s.injected(FaultError)
	ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	return false
}

// hang holds a request while FaultHang is set (for a health check, one
// marked Health). It reports false if c ended (its client went away) or the
// server closed first.
func (s *Server) hang(c *call, health bool) bool {
	held := false
	for {
		fs := s.faults.Load()
		if fs.f.Kind != FaultHang || (health && !fs.f.Health) {
			return true
		}
		if !held {
			held = true
			s.injected(FaultHang)
		}
		select {
		case <-fs.changed:
		case <-c.done:
			return false
		case <-s.quit:
			return false
		}
	}
}

// wholeAnswer is what a non-stream request gives interrupt as the number
// of events it sent: Fault.Events spares no part of its answer.
const wholeAnswer = math.MaxInt

// holder is what interrupt keeps of a request between its events.
type holder struct {
	held bool // FaultStall held it once: it counted
	free bool // aborted or server closed: no stall holds it any more
}

// interrupt meets FaultCut and FaultStall before a request writes more,
// having sent sent events. A cut closes conn and reports false: the request
// must write nothing more. A stall holds it until the fault is replaced
// (then it looks again), or c ends or the server closes (then it goes on,
// as an aborted request does); it reports true.
func (s *Server) interrupt(conn net.Conn, c *call, sent int, h *holder) bool {
	for !h.free {
		fs := s.faults.Load()
		k := fs.f.Kind
		if (k != FaultCut && k != FaultStall) || sent < fs.f.events() {
			return true
		}
		if k == FaultCut {
			s.injected(FaultCut)
			cutConn(conn)
			return false
		}
		if !h.held {
			h.held = true
			s.injected(FaultStall)
		}
		select {
		case <-fs.changed:
		case <-c.done:
			h.free = true
		case <-s.quit:
			h.free = true
		}
	}
	return true
}

// cutConn closes conn abruptly, as a killed worker's connections break:
// what was written is all the client gets. conn is nil when Handler is
// called without a connection.
func cutConn(conn net.Conn) {
	if conn != nil {
		_ = conn.Close()
	}
}
