package lb

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"pdlb/bootstrap"
	"pdlb/health"
	"pdlb/lb/load"
	"pdlb/lb/wire"
)

// Server is a pdlb load balancer. Build one with New, then Serve. Any number
// of Servers can live in one process: each owns its backends, pools and
// metrics.
type Server struct {
	cfg Config
	log zerolog.Logger
	// access writes the access lines of Config.AccessLog: the server's
	// logger at info level, whatever the root logger's, as an operator
	// who asked for them wants them under --log-level warn too.
	access    zerolog.Logger
	ms        *metrics.Set
	prefills  *Pool
	decodes   *Pool
	fallbacks *Pool
	// membersMu serialises the changes of the pools (membership.go);
	// draining holds the removed workers not yet torn down, by role and
	// address ("decode 10.0.0.1:30010").
	membersMu sync.Mutex
	draining  map[string]*Backend
	srv       *fasthttp.Server
	// admin are the listeners of ServeAdmin.
	adminMu sync.Mutex
	admin   []*fasthttp.Server
	// clientListeners and adminListeners are Serve's and ServeAdmin's
	// listeners, which Shutdown closes (listeners.go).
	clientListeners, adminListeners listeners
	newRoom                         func() uint64
	// link is how the backends reach their workers; began is when the
	// server was made, on Config.Now's clock.
	link  workerLink
	began time.Time
	// clientAuthorization is the Authorization header a client must send on
	// the keyed routes: nil without an API key.
	clientAuthorization []byte
	// adminAuthorization is the one the operator routes need (operator.go):
	// nil without an admin key.
	adminAuthorization []byte
	// requestIDHeaders are where a client's request ID is looked for, in
	// order.
	requestIDHeaders [][]byte

	routes   map[string]*route
	notFound *route
	unread   *route // requests that could not be read whole
	// serverMetrics are the server's own counters (metrics.go).
	serverMetrics
	exchanges sync.Pool
	// healthGenerate shares /health_generate's fan-outs among its callers.
	healthGenerate sharedFanOut
	// noLocalPrefill is set once a decode showed it cannot prefill locally.
	noLocalPrefill atomic.Bool
	admission      admission
	// memory is the budget of request bodies held at once (body.go).
	memory *bodyMemory
	// conns bounds the client connections (connlimit.go, wire.Budget).
	conns *wire.Budget
	// fileLimit reads the descriptor limit the budget is derived from:
	// openFileLimit, but in tests.
	fileLimit func() (uint64, error)
	// live counts exchanges not yet released, and the aborts they sent: a
	// call may outlive the client's answer, and a drain waits for it. A
	// counter, not a WaitGroup: warm-ups start during a drain, and a
	// WaitGroup may not go up from zero while it is waited on.
	live atomic.Int64
	// flight holds the exchanges serving clients, each at its slot, for
	// Shutdown to cut when the grace period is over; cutting is set, and
	// cut closed, then.
	flightMu sync.Mutex
	flight   []*exchange
	cutting  bool
	cut      chan struct{}

	// registry follows each prefill's bootstrap server; warm keeps the
	// pairs warm, nil when warm-up is off.
	registry *bootstrap.Registry
	warm     *warmer
	// byIndex are the prefills by registry index (Backend.index), the
	// draining ones included, for the registry's callbacks. indexMu
	// guards it, and is held while a prefill joins (membership.go).
	indexMu sync.Mutex
	byIndex map[int]*Backend
	// checker probes every worker; nil when active checks are off.
	checker *health.Checker
	// loads polls the workers' reported loads; nil when no policy weighs
	// them.
	loads *load.Poller
	// dns finds workers in DNS (dnsmembers.go); nil when Config.DNS names
	// none.
	dns *dnsMembers
	// kube follows pods in Kubernetes (kubemembers.go); nil when
	// Config.Kubernetes selects none.
	kube *kubeMembers

	// ctx ends background work when Shutdown cancels it; bg waits for it.
	ctx       context.Context
	cancel    context.CancelFunc
	startOnce sync.Once
	bg        sync.WaitGroup
}

// New builds a Server from cfg, which it validates. log is the root logger;
// the server derives its own from it.
func New(cfg Config, log zerolog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Server{
		cfg:     cfg,
		log:     log.With().Str("component", "lb").Logger(),
		ms:      metrics.NewSet(),
		newRoom: cfg.NewRoom,
		cut:     make(chan struct{}),
		began:   cfg.Now(),

		draining:  map[string]*Backend{},
		fileLimit: openFileLimit,
	}
	s.access = s.log.Level(zerolog.InfoLevel)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.link = workerLink{dialer: wire.NewDialer(cfg.Dial), steps: wire.NewSteps(), quit: s.ctx.Done()}
	if cfg.APIKey != "" {
		s.clientAuthorization = []byte(bearer(cfg.APIKey))
	}
	if cfg.AdminAPIKey != "" {
		s.adminAuthorization = []byte(bearer(cfg.AdminAPIKey))
	}
	for _, h := range cfg.RequestIDHeaders {
		s.requestIDHeaders = append(s.requestIDHeaders, []byte(h))
	}
	if s.newRoom == nil {
		s.newRoom = bootstrap.NewRoom
	}
	s.serverMetrics.init(s.ms)
	s.admission = newAdmission(&s.cfg)
	s.memory = newBodyMemory(s.cfg.MaxBodyMemory)
	s.ms.NewGauge(`pdlb_body_memory_bytes`, func() float64 { return float64(s.memory.used.Load()) })
	s.ms.NewGauge(`pdlb_body_memory_limit_bytes`, func() float64 { return float64(s.memory.limit) })
	s.ms.NewGauge(`pdlb_requests_queued`, func() float64 { return float64(s.admission.queued.Load()) })
	s.ms.NewGauge(`pdlb_requests_admitted`, func() float64 { return float64(len(s.admission.slots)) })
	if err := s.buildPools(); err != nil {
		return nil, err
	}
	s.conns = s.newConnBudget()
	s.buildLoads()
	s.buildRoutes()
	s.buildRegistry(log)
	s.buildChecker(log)
	if err := s.buildDiscovery(log); err != nil {
		return nil, err
	}
	if err := s.buildKubernetes(log); err != nil {
		return nil, err
	}
	s.warnEmptyPools()
	if !cfg.NoPrewarm {
		s.warm = newWarmer(s)
	}
	s.buildServer()
	return s, nil
}

// buildServer sets up the fasthttp server of the client listeners (Serve).
func (s *Server) buildServer() {
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleParseError,
		Name:               "pdlb",
		Logger:             redactingLogger{&s.log},
		ReadTimeout:        s.cfg.ClientReadTimeout,
		IdleTimeout:        s.cfg.ClientIdleTimeout,
		WriteTimeout:       s.cfg.ClientWriteTimeout,
		MaxRequestBodySize: s.cfg.MaxRequestBodySize,
		// pdlb reads bodies itself, as they arrive, within its body
		// memory (body.go): fasthttp reads at most 8 KiB of one.
		StreamRequestBody: true,
		// The read buffer bounds the request header. ReduceMemoryUsage
		// hands it back once the request is read, so a connection holds only
		// its write buffer while its stream runs: at 1,024 streams a tenth of
		// pdlb's memory. The price, one more read call per keep-alive
		// request, did not show in the benchmarks (README, Performance).
		ReadBufferSize:       s.cfg.MaxHeaderSize,
		WriteBufferSize:      wire.ClientWriteBufferSize,
		ReduceMemoryUsage:    true,
		NoDefaultContentType: true,
		CloseOnShutdown:      true,
		// pdlb times requests with its own clock; fasthttp's reading of it
		// for each request would go unused.
		LazyRequestTime: true,
		ConnState:       s.conns.Track,
		Concurrency:     s.conns.Concurrency(),
	}
}

// adminMaxConnections bounds the connections of each admin listener.
const adminMaxConnections = 32

func (s *Server) buildPools() error {
	prefillURLs := make([]string, len(s.cfg.Prefill))
	for i, p := range s.cfg.Prefill {
		prefillURLs[i] = p.URL
	}
	var err error
	if s.prefills, err = s.newPool(rolePrefill, s.cfg.PrefillPolicy, prefillURLs); err != nil {
		return err
	}
	if s.decodes, err = s.newPool(roleDecode, s.cfg.DecodePolicy, s.cfg.Decode); err != nil {
		return err
	}
	s.fallbacks, err = s.newPool(roleFallback, s.cfg.FallbackPolicy, s.cfg.Fallback)
	return err
}

// newPool makes the pool of role's workers, one backend a URL, picked by
// the policy named name.
func (s *Server) newPool(role, name string, urls []string) (*Pool, error) {
	pool := &Pool{role: role, policy: name}
	pool.setPolicy(&s.cfg, s.ms, s.log)
	for i, u := range urls {
		b, err := newBackend(role, i, u, &s.cfg, s.ms, s.log, s.link)
		if err != nil {
			return nil, fmt.Errorf("invalid %s URL: %w", role, err)
		}
		b.sources.Store(uint32(sourceStart))
		pool.join(b)
	}
	return pool, nil
}

// workerAuthorization is the Authorization header of pdlb's calls to the
// workers: "" without an API key.
func (s *Server) workerAuthorization() string {
	if s.cfg.APIKey == "" {
		return ""
	}
	return bearer(s.cfg.APIKey)
}

// Metrics returns the server's metrics set, for registering elsewhere.
func (s *Server) Metrics() *metrics.Set { return s.ms }

// Serve accepts clients on ln until Shutdown. It starts the server's
// background work on first use.
func (s *Server) Serve(ln net.Listener) error {
	s.startOnce.Do(s.startBackground)
	ln, ok := s.clientListeners.listening(ln)
	if !ok {
		return nil // shut down already
	}
	s.log.Info().Str("addr", ln.Addr().String()).Int("prefill", len(s.prefills.backends())).
		Int("decode", len(s.decodes.backends())).Int("max_connections", s.conns.Max()).Msg("serving")
	err := s.srv.Serve(wire.Listener{Listener: ln, Log: &s.log, Budget: s.conns, Steps: s.link.steps,
		OutOfResources: health.OutOfResources})
	if s.clientListeners.closed() {
		return nil // the listener closed by Shutdown
	}
	return err
}

// ServeAdmin serves /metrics on ln (sglang_router's --prometheus-port),
// /liveness and /readiness for probes, and the operator routes
// (operator.go), which need no admin key here when none is set: the
// listener is the operator's. With pprof it serves Go's
// profiles under /debug/pprof/ too (off unless asked: profiles expose
// internals). It serves until Shutdown, and logs the address it serves on,
// as Serve does.
func (s *Server) ServeAdmin(ln net.Listener, pprof bool) error {
	rt := s.routes["/metrics"]
	srv := &fasthttp.Server{Name: "pdlb", Logger: redactingLogger{&s.log}, ErrorHandler: s.handleParseError,
		// An admin listener's clients get the main one's time limits, its
		// routes take small bodies only, and its few clients (scrapers,
		// operators) hold few of the descriptors pdlb keeps for itself
		// (reservedDescriptors).
		ReadTimeout: s.cfg.ClientReadTimeout, WriteTimeout: s.cfg.ClientWriteTimeout, IdleTimeout: s.cfg.ClientIdleTimeout,
		ReadBufferSize: s.cfg.MaxHeaderSize, MaxRequestBodySize: maxControlBody, Concurrency: adminMaxConnections,
		Handler: func(ctx *fasthttp.RequestCtx) {
			path := ctx.Path()
			if op := s.routeOf(path); op != nil && op.forOperators != nil {
				s.serve(ctx, op, true)
				return
			}
			switch {
			case string(path) == rt.path:
				s.serveControl(ctx, rt)
			case string(path) == "/liveness" || string(path) == "/readiness":
				// Probes here are outside the client connection budget: a
				// pdlb whose clients hold every connection is busy, not dead.
				s.serveControl(ctx, s.routes[string(path)])
			case pprof && bytes.HasPrefix(path, []byte("/debug/pprof/")):
				pprofhandler.PprofHandler(ctx)
			default:
				s.writeError(ctx, fasthttp.StatusNotFound, reasonNotFound, "no route for "+string(path)+" here")
			}
		}}
	ln, ok := s.adminListeners.listening(ln)
	if !ok {
		return nil // shut down already
	}
	s.adminMu.Lock()
	s.admin = append(s.admin, srv)
	s.adminMu.Unlock()
	s.log.Info().Str("addr", ln.Addr().String()).Bool("pprof", pprof).Msg("serving admin")
	if err := srv.Serve(ln); err != nil && !s.adminListeners.closed() {
		return err
	}
	return nil
}

func (s *Server) startBackground() {
	s.runChecker()
	s.runRouting()
	s.bg.Go(func() {
		s.memory.returnToOS(s.ctx.Done())
	})
	s.bg.Go(func() {
		s.registry.Run(s.ctx.Done())
	})
	if s.warm != nil {
		s.bg.Go(func() {
			s.warm.keepWarm(s.cfg.BootstrapRefresh, s.ctx.Done())
		})
	}
	s.runDiscovery()
	s.runKubernetes()
}
