package fake

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

const (
	// maxBodySize admits long-context prompts sent as input_ids.
	maxBodySize = 64 << 20
	// maxIdleWorker keeps fasthttp's worker-pool cleaner short-lived, so its
	// goroutine is gone soon after Close (goleak in tests).
	maxIdleWorker = 200 * time.Millisecond
)

// Server is a fake SGLang server playing one Role. Create it with New, then
// either Start it on a Network or mount Handler (and, for a prefill,
// BootstrapHandler) on fasthttp servers of your own. All methods are safe for
// concurrent use. A Server is single-use: once closed it cannot be started.
type Server struct {
	cfg  Config
	log  zerolog.Logger
	quit chan struct{} // closed by Close: every wait ends

	mu      sync.Mutex // guards Start, Close, the slots and the fault's changes
	started bool
	closed  bool
	net     *Network // where Start listens, and a refusing slot listens again
	api     *slot    // the HTTP API, set by Start
	boot    *slot    // a prefill's bootstrap server, set by Start
	regNet  *Network // where the prefill is registered, under regKeys
	regKeys []string
	faults  atomic.Pointer[faultState] // read by requests, replaced under mu

	ep        atomic.Pointer[endpoint]
	startedAt atomic.Int64 // per cfg.Now, in Unix nanoseconds
	created   time.Time    // by the monotonic clock, for /get_load's ts_tic
	kv        rendezvous
	infos     []infoCache // per DP rank: each rank has its own prefill_info_table
	ranks     []rankModel // per DP rank: the performance model (model.go)
	hbMu      sync.Mutex  // guards hbStarted and hbDone (heartbeat.go)
	hbStarted bool
	hbDone    chan struct{} // closed when the health polls end
	rr        atomic.Uint64 // round-robin dispatch to DP ranks
	calls     sync.Map      // rid → *call, the in-flight generate requests
	roomRanks roomRanks     // a prefill bootstrap server's /register_dp_rank
	st        counters
	parsers   fastjson.ParserPool
	bufs      sync.Pool
	ridSeed   uint64
	ridSeq    atomic.Uint64
	canary    []byte // Config.Canary in lower case, nil without one
}

// endpoint is where a server is reachable, fixed by Start.
type endpoint struct {
	net       *Network // where a decode reaches bootstrap servers; may be nil
	apiHost   string
	apiPort   int
	bootHost  string // reported as rank_ip
	bootPort  int    // reported as disaggregation_bootstrap_port
	routeInfo []byte // the bootstrap server's parallel info answer
}

// New returns a Server for cfg, with zero fields set to their defaults. It
// panics if cfg.Role is not one of the Role constants.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Log, quit: make(chan struct{}), ridSeed: rand.Uint64(), created: time.Now()}
	if cfg.Canary != "" {
		s.canary = bytes.ToLower([]byte(cfg.Canary))
	}
	s.kv.rooms = make(map[roomKey]*meeting)
	s.infos = make([]infoCache, cfg.DPSize)
	for i := range s.infos {
		s.infos[i].m = make(map[string]*infoEntry)
		s.infos[i].fails = make(map[string]int)
	}
	s.st.ranks = make([]atomic.Uint64, cfg.DPSize)
	s.ranks = newRankModels(cfg)
	s.faults.Store(&faultState{changed: make(chan struct{})})
	s.startedAt.Store(cfg.Now().UnixNano())
	s.ep.Store(s.newEndpoint(cfg.Network, "127.0.0.1:0", ""))
	return s
}

// Start serves the HTTP API on addr of n and returns once it listens. A
// prefill also serves its bootstrap server on host(addr):BootstrapPort, or
// on Config.BootstrapAddr, and joins n's registry of prefills. Start fails
// if the server was started or closed before, or an address is taken.
func (s *Server) Start(n *Network, addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return errors.New("cannot start fake server: already started or closed")
	}
	ln, err := n.Listen(addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	var bln net.Listener
	if s.cfg.Role == RolePrefill {
		if bln, err = n.Listen(s.bootstrapListenAddr(ln.Addr().String())); err != nil {
			_ = ln.Close()
			return fmt.Errorf("cannot listen for the bootstrap server: %w", err)
		}
		s.regNet, s.regKeys = n, n.addPrefill(bln.Addr().String(), s)
	}
	netw := s.cfg.Network
	if netw == nil {
		netw = n
	}
	bootAddr := ""
	if bln != nil {
		bootAddr = bln.Addr().String()
	}
	s.ep.Store(s.newEndpoint(netw, ln.Addr().String(), bootAddr))
	s.startedAt.Store(s.cfg.Now().UnixNano())
	s.started, s.net = true, n
	s.api = s.newSlot(ln, "uvicorn", s.Handler)
	if bln != nil {
		s.boot = s.newSlot(bln, "aiohttp", s.BootstrapHandler)
	}
	return nil
}

// Close stops both listeners, ends in-flight requests and KV waits at once,
// and returns when every goroutine the server started is done, whatever
// fault is set. It may be called before Start; later calls do nothing and
// return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.quit)
	if s.regNet != nil {
		s.regNet.removePrefill(s.regKeys, s)
	}
	var errs []error
	slots := s.slots()
	for _, sl := range slots {
		errs = append(errs, sl.stop())
	}
	for _, sl := range slots {
		sl.conns.shut()
	}
	for _, sl := range slots {
		sl.conns.wait()
	}
	s.stopHeartbeat()
	return errors.Join(errs...)
}

// slots returns the addresses the server serves: none before Start.
func (s *Server) slots() []*slot {
	switch {
	case s.api == nil:
		return nil
	case s.boot == nil:
		return []*slot{s.api}
	}
	return []*slot{s.api, s.boot}
}

// Handler is the HTTP API (SGLang's entrypoints/http_server.py): POST
// /generate, /v1/completions and /v1/chat/completions; GET /health,
// /health_generate, /server_info, /get_server_info, /model_info,
// /get_model_info, /v1/models, /v1/loads and /get_load (loads.go); POST
// /flush_cache and /abort_request; GET
// StatsPath with Config.StatsRoute, whatever Config.APIKey. It may be mounted
// on any fasthttp server; Start mounts it on its own. Faults act on it
// wherever it is mounted, except FaultRefuse and CloseIdleConnections, which
// need the listener of Start; so does noticing a client that goes away.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	markBusy(ctx.Conn())
	defer markIdle(ctx.Conn())
	if h := s.cfg.OnRequest; h != nil {
		h(string(ctx.Path()), ctx.PostBody())
	}
	s.countCanary(ctx)
	if s.cfg.StatsRoute && string(ctx.Path()) == StatsPath {
		s.serveStats(ctx)
		return
	}
	if !s.authorized(ctx) {
		s.st.unauthorized.Add(1)
		writeJSON(ctx, fasthttp.StatusUnauthorized, []byte(`{"error":"Unauthorized"}`))
		return
	}
	switch string(ctx.Path()) {
	case "/generate":
		s.st.generate.Add(1)
		s.serveGenerate(ctx, routeGenerate)
	case "/v1/completions":
		s.st.completions.Add(1)
		s.serveGenerate(ctx, routeCompletions)
	case "/v1/chat/completions":
		s.st.chat.Add(1)
		s.serveGenerate(ctx, routeChat)
	case "/health":
		s.st.health.Add(1)
		s.serveHealth(ctx)
	case "/health_generate":
		s.st.health.Add(1)
		s.st.healthGenerate.Add(1)
		s.serveHealth(ctx)
	case "/server_info", "/get_server_info":
		s.st.serverInfo.Add(1)
		s.serveServerInfo(ctx)
	case "/model_info", "/get_model_info":
		s.st.modelInfo.Add(1)
		s.serveModelInfo(ctx)
	case "/v1/models":
		s.st.modelInfo.Add(1)
		s.serveModels(ctx)
	case "/flush_cache":
		s.st.flush.Add(1)
		s.serveFlushCache(ctx)
	case "/abort_request":
		s.st.abort.Add(1)
		s.serveAbort(ctx)
	case "/v1/loads":
		s.st.loads.Add(1)
		s.serveLoads(ctx)
	case "/get_load":
		s.st.loads.Add(1)
		s.serveGetLoad(ctx)
	default:
		s.st.other.Add(1)
		writeJSON(ctx, fasthttp.StatusNotFound, []byte(`{"detail":"Not Found"}`))
	}
}

// authorized reports whether ctx may be served under SGLang's --api-key
// rules.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.APIKey == "" || ctx.IsOptions() {
		return true
	}
	path := ctx.Path()
	if bytes.HasPrefix(path, []byte("/health")) || bytes.HasPrefix(path, []byte("/metrics")) {
		return true
	}
	return string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)) == "Bearer "+s.cfg.APIKey
}

// bootstrapListenAddr is where a prefill's bootstrap server listens, given
// the address its API listens on.
func (s *Server) bootstrapListenAddr(apiAddr string) string {
	if s.cfg.BootstrapAddr != "" {
		return s.cfg.BootstrapAddr
	}
	host, _, err := net.SplitHostPort(apiAddr)
	if err != nil {
		host = apiAddr
	}
	return joinHostPort(host, strconv.Itoa(s.cfg.BootstrapPort))
}

// newEndpoint describes a server listening on apiAddr and, for a prefill,
// bootAddr ("" before Start or for other roles).
func (s *Server) newEndpoint(n *Network, apiAddr, bootAddr string) *endpoint {
	ep := &endpoint{net: n, bootPort: s.cfg.BootstrapPort, bootHost: "127.0.0.1"}
	host, port, _ := net.SplitHostPort(apiAddr)
	ep.apiHost = host
	ep.apiPort, _ = strconv.Atoi(port)
	if bootAddr != "" {
		host, port, _ := net.SplitHostPort(bootAddr)
		if !isUnspecified(host) {
			ep.bootHost = host
		}
		ep.bootPort, _ = strconv.Atoi(port)
	}
	ep.routeInfo = s.appendRouteInfo(nil, ep.apiPort)
	return ep
}

func (s *Server) endpoint() *endpoint { return s.ep.Load() }

// Addr is the address the server's API listens on, as its listener reports
// it (the port the system picked for ":0"); "" before Start.
func (s *Server) Addr() string {
	if ep := s.endpoint(); ep != nil {
		return net.JoinHostPort(ep.apiHost, strconv.Itoa(ep.apiPort))
	}
	return ""
}

// BootstrapPort is the port a prefill's bootstrap server listens on, once
// started.
func (s *Server) BootstrapPort() int {
	if ep := s.endpoint(); ep != nil {
		return ep.bootPort
	}
	return s.cfg.BootstrapPort
}

// elapsed is the time since Start per cfg.Now.
func (s *Server) elapsed() time.Duration {
	return time.Duration(s.cfg.Now().UnixNano() - s.startedAt.Load())
}

// closing reports whether Close was called.
func (s *Server) closing() bool {
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

// getBuf returns a pooled buffer of length 0; putBuf returns it.
func (s *Server) getBuf() []byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4096)
}

func (s *Server) putBuf(b []byte) {
	if cap(b) > 1<<20 {
		return // do not pin huge answers
	}
	s.bufs.Put(&b)
}

// newRID returns a fresh request id: 32 hex digits like uuid4().hex, with
// the "chatcmpl-" or "cmpl-" prefix SGLang gives OpenAI requests.
func (s *Server) newRID(rt route) string {
	b := make([]byte, 0, 41)
	switch rt {
	case routeChat:
		b = append(b, "chatcmpl-"...)
	case routeCompletions:
		b = append(b, "cmpl-"...)
	}
	b = appendHex64(b, s.ridSeed)
	b = appendHex64(b, s.ridSeq.Add(1))
	return string(b)
}

// appendHex64 appends x as 16 zero-padded hex digits.
func appendHex64(dst []byte, x uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(x>>uint(shift))&0xf])
	}
	return dst
}
