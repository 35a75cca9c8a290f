package lb

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// operatorCall is a request to an operator route, or to a client route
// beside them, with what pdlb must answer it.
type operatorCall struct {
	method, path, body, auth string
	want                     int
}

// operatorCalls are calls to the operator routes /flush_cache,
// /bootstrap and an /abort_request with abort_all.
func operatorCalls(auth string, want int) []operatorCall {
	return []operatorCall{
		{"POST", "/flush_cache", "", auth, want},
		{"GET", "/bootstrap", "", auth, want},
		{"POST", "/abort_request", `{"abort_all": true}`, auth, want},
	}
}

// check sends each call with send and checks the answer: a 401 asks for a
// bearer key, a 403 says how to enable the route.
func checkCalls(t *testing.T, where string, send func(method, path, body string, headers ...string) reply, calls []operatorCall) {
	t.Helper()
	for _, c := range calls {
		var headers []string
		if c.auth != "" {
			headers = []string{"Authorization", c.auth}
		}
		r := send(c.method, c.path, c.body, headers...)
		if r.status != c.want {
			t.Errorf("%s: %s %s %s with %q: got %d %s; want %d", where, c.method, c.path, c.body, c.auth, r.status, r.body, c.want)
			continue
		}
		msg := gjson.GetBytes(r.body, "error.message").String()
		switch c.want {
		case fasthttp.StatusUnauthorized:
			if gjson.GetBytes(r.body, "error.type").String() != "authentication_error" || string(r.header.Peek("WWW-Authenticate")) != "Bearer" {
				t.Errorf("%s: %s %s: got %s, WWW-Authenticate %q; want an authentication_error asking for a bearer key",
					where, c.method, c.path, r.body, r.header.Peek("WWW-Authenticate"))
			}
		case fasthttp.StatusForbidden:
			if !strings.Contains(msg, "--admin-api-key") || !strings.Contains(msg, "loopback") ||
				!strings.Contains(msg, "--prometheus-port") || !strings.Contains(msg, "--pprof-addr") {
				t.Errorf("%s: %s %s: got %q; want it to say how to enable the route", where, c.method, c.path, msg)
			}
		}
	}
}

// operatorHarness starts a pair recording what reaches the workers, and
// pdlb with cfg.
func operatorHarness(t *testing.T, cfg Config) (*harness, *Server, *fake.Server, *fake.Server) {
	t.Helper()
	h := newHarness(t)
	p, d := h.pair(fake.Config{}, fake.Config{})
	return h, h.start(cfg), p, d
}

// adminListener has srv serve ServeAdmin on the harness network, and
// returns a send for it.
func (h *harness) adminListener(srv *Server) func(method, path, body string, headers ...string) reply {
	h.t.Helper()
	ln, err := h.nw.Listen("admin:9090")
	if err != nil {
		h.t.Fatal(err)
	}
	go func() { _ = srv.ServeAdmin(ln, false) }()
	cl := &fasthttp.HostClient{Addr: "admin:9090", Dial: h.nw.Dial}
	h.t.Cleanup(cl.CloseIdleConnections)
	return sendVia(h.t, cl)
}

// loopback has srv serve on 127.0.0.1 too, and returns a send for it.
func (h *harness) loopback(srv *Server) func(method, path, body string, headers ...string) reply {
	h.t.Helper()
	addr := h.serveTCP(srv)
	cl := &fasthttp.HostClient{Addr: addr, Dial: func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }}
	h.t.Cleanup(cl.CloseIdleConnections)
	return sendVia(h.t, cl)
}

// sendVia returns a send through cl, in the shape of harness.do.
func sendVia(t testing.TB, cl *fasthttp.HostClient) func(method, path, body string, headers ...string) reply {
	return func(method, path, body string, headers ...string) reply {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(method)
		req.SetRequestURI("http://pdlb" + path)
		req.Header.SetContentType("application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		req.SetBodyString(body)
		r := reply{header: &fasthttp.ResponseHeader{}}
		if err := cl.DoTimeout(req, resp, 20*time.Second); err != nil {
			t.Errorf("%s %s: %s", method, path, err)
			return r
		}
		r.status, r.body = resp.StatusCode(), append([]byte(nil), resp.Body()...)
		resp.Header.CopyTo(r.header)
		return r
	}
}

// With --admin-api-key, the operator routes need it, on every listener:
// neither --api-key nor loopback nor the admin listener stands for it
// (issue 19: any client holding the shared key could abort everyone's
// requests). It opens the clients' keyed routes too; an abort by rid stays
// a client's, under --api-key.
func TestAdminKeyGuardsOperatorRoutes(t *testing.T) {
	cfg := defaultConfig()
	cfg.APIKey, cfg.AdminAPIKey = "client-key", "admin-key"
	h, srv, p, d := operatorHarness(t, cfg)
	const admin, client = "Bearer admin-key", "Bearer client-key"
	var calls []operatorCall
	calls = append(calls, operatorCalls("", fasthttp.StatusUnauthorized)...)
	calls = append(calls, operatorCalls(client, fasthttp.StatusUnauthorized)...)
	calls = append(calls, operatorCalls("admin-key", fasthttp.StatusUnauthorized)...)
	calls = append(calls, operatorCalls(admin, fasthttp.StatusOK)...)
	calls = append(calls,
		operatorCall{"POST", "/abort_request", `{"rid": "request-1"}`, "", fasthttp.StatusUnauthorized},
		operatorCall{"POST", "/abort_request", `{"rid": "request-1"}`, client, fasthttp.StatusOK},
		operatorCall{"POST", "/abort_request", `{"rid": "request-1"}`, admin, fasthttp.StatusOK},
		operatorCall{"POST", "/generate", `{"text": "a"}`, admin, fasthttp.StatusOK},
		operatorCall{"POST", "/generate", `{"text": "a"}`, client, fasthttp.StatusOK},
		operatorCall{"GET", "/health", "", "", fasthttp.StatusOK},
	)
	checkCalls(t, "main listener", h.do, calls)
	checkCalls(t, "loopback", h.loopback(srv), operatorCalls("", fasthttp.StatusUnauthorized))
	// A worker answers /flush_cache with a 400 while it serves a request,
	// as SGLang does: a prefill may still answer a generation whose client
	// has its answer.
	waitFor(t, "the workers to be idle", func() bool { return p.Stats().InFlight == 0 && d.Stats().InFlight == 0 })
	checkCalls(t, "admin listener", h.adminListener(srv), append(operatorCalls(client, fasthttp.StatusUnauthorized),
		operatorCall{"POST", "/flush_cache", "", admin, fasthttp.StatusOK}))
	for _, w := range []*fake.Server{p, d} {
		// Two flushes and an abort_all with the admin key; two aborts by rid.
		if st := w.Stats(); st.FlushCache != 2 || st.AbortRequest != 3 {
			t.Errorf("a worker got %d flushes and %d aborts; want 2 and 3, those with the right key", st.FlushCache, st.AbortRequest)
		}
	}
}

// Without --admin-api-key, the operator routes answer only on the admin
// listener and to loopback clients not forwarded by a proxy; every other
// client gets a 403 that says how to enable them, and reaches no worker.
// --api-key still guards /flush_cache and /abort_request where they
// answer. An abort by rid is a client's.
func TestOperatorRoutesAnswerOperatorsOnly(t *testing.T) {
	for _, remote := range []struct {
		name string
		addr net.Addr // as the wrapped listener reports it; nil: in memory, no IP
		want int
	}{
		{"in memory", nil, fasthttp.StatusForbidden},
		{"remote", &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 40000}, fasthttp.StatusForbidden},
		{"loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, fasthttp.StatusOK},
		{"loopback6", &net.TCPAddr{IP: net.IPv6loopback, Port: 40000}, fasthttp.StatusOK},
	} {
		t.Run(remote.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				if remote.addr != nil {
					h.wrapListener = func(ln net.Listener) net.Listener { return remoteAddrListener{ln, remote.addr} }
				}
				p, d := h.pair(fake.Config{}, fake.Config{})
				h.start(defaultConfig())
				checkCalls(t, remote.name, h.do, append(operatorCalls("", remote.want),
					operatorCall{"POST", "/abort_request", `{"rid": "request-1"}`, "", fasthttp.StatusOK}))
				if remote.want == fasthttp.StatusOK {
					// A proxy on the same host makes every client loopback.
					checkCalls(t, remote.name+" forwarded", func(method, path, body string, headers ...string) reply {
						return h.do(method, path, body, append(headers, "X-Forwarded-For", "10.0.0.7")...)
					}, operatorCalls("", fasthttp.StatusForbidden))
				}
				flushes, aborts := uint64(0), uint64(1)
				if remote.want == fasthttp.StatusOK {
					flushes, aborts = 1, 2
				}
				for _, w := range []*fake.Server{p, d} {
					if st := w.Stats(); st.FlushCache != flushes || st.AbortRequest != aborts {
						t.Errorf("a worker got %d flushes and %d aborts; want %d and %d", st.FlushCache, st.AbortRequest, flushes, aborts)
					}
				}
			})
		})
	}

	// On a real loopback socket and on the admin listener, they answer,
	// with --api-key where it applies.
	cfg := defaultConfig()
	cfg.APIKey = "client-key"
	h, srv, _, _ := operatorHarness(t, cfg)
	keyed := []operatorCall{
		{"POST", "/flush_cache", "", "", fasthttp.StatusUnauthorized},
		{"POST", "/abort_request", `{"abort_all": true}`, "", fasthttp.StatusUnauthorized},
		{"GET", "/bootstrap", "", "", fasthttp.StatusOK},
		{"POST", "/flush_cache", "", "Bearer client-key", fasthttp.StatusOK},
		{"POST", "/abort_request", `{"abort_all": true}`, "Bearer client-key", fasthttp.StatusOK},
	}
	checkCalls(t, "main listener", h.do, operatorCalls("Bearer client-key", fasthttp.StatusForbidden))
	checkCalls(t, "loopback", h.loopback(srv), keyed)
	admin := h.adminListener(srv)
	checkCalls(t, "admin listener", admin, keyed)
	// The admin listener serves the operator routes, not the clients'.
	if r := admin("POST", "/generate", `{"text": "a"}`, "Authorization", "Bearer client-key"); r.status != fasthttp.StatusNotFound {
		t.Errorf("admin listener: /generate got %d %s; want 404", r.status, r.body)
	}
}

// A caller on loopback whose request carries a forwarding header is told
// that the header is why loopback did not count: it was told to "call
// from loopback", which it did (curl -H 'X-Forwarded-For: 1.2.3.4'
// 127.0.0.1:PORT/bootstrap). Every caller is told of both admin
// listeners, --pprof-addr's too, which serve the operator routes as
// --prometheus-port's does.
func TestForwardedLoopbackCallerIsToldWhy(t *testing.T) {
	h, srv, _, _ := operatorHarness(t, defaultConfig())
	loopback := h.loopback(srv)
	for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-Ip"} {
		r := loopback("GET", "/bootstrap", "", header, "1.2.3.4")
		msg := gjson.GetBytes(r.body, "error.message").String()
		if r.status != fasthttp.StatusForbidden {
			t.Errorf("%s: got %d %s; want 403", header, r.status, r.body)
			continue
		}
		for _, want := range []string{"came from loopback with a proxy's forwarding header (" + header + ")", "does not trust it as loopback",
			"--admin-api-key", "--prometheus-port or --pprof-addr listener"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: got %q; want it to say %q", header, msg, want)
			}
		}
		if strings.Contains(msg, "call from loopback or") {
			t.Errorf("%s: got %q; want no advice to call from loopback, where the caller is", header, msg)
		}
	}
	r := h.do("GET", "/bootstrap", "") // in memory: not loopback
	msg := gjson.GetBytes(r.body, "error.message").String()
	if r.status != fasthttp.StatusForbidden || !strings.Contains(msg, "call from loopback or on the --prometheus-port or --pprof-addr listener") {
		t.Errorf("remote: got %d %q; want a 403 naming loopback and both admin listeners", r.status, msg)
	}
}

// --mini-lb keeps mini_lb's open control routes (--api-key still applies),
// for repro scripts; an admin key, when set, still rules them.
func TestOpenOperatorRoutes(t *testing.T) {
	cfg := defaultConfig()
	cfg.OpenOperatorRoutes = true
	h, _, _, _ := operatorHarness(t, cfg)
	checkCalls(t, "open", h.do, operatorCalls("", fasthttp.StatusOK))

	cfg.APIKey = "client-key"
	h, _, _, _ = operatorHarness(t, cfg)
	checkCalls(t, "open with --api-key", h.do, append(operatorCalls("Bearer client-key", fasthttp.StatusOK),
		operatorCall{"POST", "/flush_cache", "", "", fasthttp.StatusUnauthorized}))

	cfg.AdminAPIKey = "admin-key"
	h, _, _, _ = operatorHarness(t, cfg)
	checkCalls(t, "open with --admin-api-key", h.do, append(operatorCalls("Bearer client-key", fasthttp.StatusUnauthorized),
		operatorCall{"POST", "/flush_cache", "", "Bearer admin-key", fasthttp.StatusOK}))
}

// An abort by rid is a client's: the workers get pdlb's own body naming
// that rid and nothing else, so no spelling of abort_all that pdlb reads
// one way and SGLang another reaches them. The body is read as Python
// reads it: decoded keys, the last of duplicates. Any other body is an
// operator's: an abort_all, one pydantic takes for true ("yes", 1), an
// empty rid (SGLang aborts by prefix: every request); a body that is no
// JSON object gets a 400.
func TestAbortByRIDIsRebuilt(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		record := func(path string, body []byte) {
			if path == "/abort_request" {
				mu.Lock()
				got = append(got, string(body))
				mu.Unlock()
			}
		}
		h := newHarness(t)
		h.pair(fake.Config{OnRequest: record}, fake.Config{OnRequest: record})
		h.start(defaultConfig())
		for _, body := range []string{
			`{"rid": "request-1"}`,
			`{"rid": "request-1", "abort_all": true, "abort_all": false}`,
			`{"abort_all": null, "rid": "request-1", "extra": {"abort_all": true}}`,
			`{"rid": "other-request", "r\u0069d": "request-1"}`,
		} {
			mu.Lock()
			got = nil
			mu.Unlock()
			if r := h.post("/abort_request", body); r.status != fasthttp.StatusOK {
				t.Errorf("%s: got %d %s; want 200, an abort by rid", body, r.status, r.body)
			}
			mu.Lock()
			if len(got) != 2 || got[0] != `{"rid":"request-1"}` || got[1] != got[0] {
				t.Errorf("%s: the workers got %q; want {\"rid\":\"request-1\"} each", body, got)
			}
			mu.Unlock()
		}
		mu.Lock()
		got = nil
		mu.Unlock()
		for _, body := range []string{
			`{"abort_all": true}`, `{"rid": "request-1", "abort_all": "yes"}`, `{"rid": "request-1", "abort_all": 1}`,
			`{"rid": "request-1", "abort_all": false, "abort_all": true}`, `{"rid": "request-1", "rid": ""}`,
			`{"rid": ""}`, `{"rid": ["request-1", "request-2"]}`, `{"rid": 7}`, `{}`,
		} {
			if r := h.post("/abort_request", body); r.status != fasthttp.StatusForbidden {
				t.Errorf("%s: got %d %s; want 403, an operator's abort", body, r.status, r.body)
			}
		}
		// A body that is no JSON object names nothing: the client's mistake
		// (TestAbortRequestBodyMustBeAnObject).
		for _, body := range []string{`[{"rid": "request-1"}]`, `not json`, `{"rid": "request-1"`, ``} {
			if r := h.post("/abort_request", body); r.status != fasthttp.StatusBadRequest {
				t.Errorf("%s: got %d %s; want 400, not a JSON object", body, r.status, r.body)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 0 {
			t.Errorf("the workers got %q from refused aborts", got)
		}
	})
}

// remoteAddrListener reports addr as the remote address of every
// connection it accepts.
type remoteAddrListener struct {
	net.Listener
	addr net.Addr
}

func (l remoteAddrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteAddrConn{c, l.addr}, nil
}

type remoteAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteAddrConn) RemoteAddr() net.Addr { return c.addr }
