package lb

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// TestWorkersOnIPv6 serves a request through workers that listen on the
// IPv6 loopback only, over real TCP, with pdlb's defaults: the request
// path, the warm-up, the health checks and the bootstrap registry (both its
// /server_info lookup and the bootstrap server) must all reach IPv6.
func TestWorkersOnIPv6(t *testing.T) {
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %s", err)
	}
	_ = probe.Close()
	nw := fake.NewTCPNetwork()
	start := func(cfg fake.Config) *fake.Server {
		cfg.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
		s := fake.New(cfg)
		if err := s.Start(nw, "[::1]:0"); err != nil {
			t.Fatalf("cannot start fake %s: %s", cfg.Role, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	p := start(fake.Config{Role: fake.RolePrefill, BootstrapAddr: "[::1]:0", KVTimeout: 5 * time.Second})
	d := start(fake.Config{Role: fake.RoleDecode, KVTimeout: 5 * time.Second})

	// No bootstrap port: pdlb asks the prefill's /server_info for it.
	srv, err := New(Config{
		Prefill: []PrefillSpec{{URL: "http://" + p.Addr()}},
		Decode:  []string{"http://" + d.Addr()},
	}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := srv.registry.WaitReady(ctx, 0)
	if err != nil {
		t.Fatalf("the registry cannot reach the prefill over IPv6: %s", err)
	}
	if st.Port != p.BootstrapPort() {
		t.Fatalf("got bootstrap port %d; want %d, from /server_info", st.Port, p.BootstrapPort())
	}

	cl := &fasthttp.HostClient{Addr: ln.Addr().String(), DialDualStack: true}
	defer cl.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + ln.Addr().String() + "/generate")
	req.SetBodyString(`{"text":"hi","sampling_params":{"max_new_tokens":2}}`)
	if err := cl.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("got %d %s; want 200", resp.StatusCode(), resp.Body())
	}
	// The warm-up may have sent one more pair of its own.
	waitFor(t, "health checks of both workers", func() bool { return p.Stats().Health > 0 && d.Stats().Health > 0 })
	if p.Stats().Generate == 0 || d.Stats().Generate == 0 {
		t.Fatalf("got %d prefill and %d decode generations; want the request on both", p.Stats().Generate, d.Stats().Generate)
	}
}

// Workers behind https are reached over TLS on every path: both legs and
// the info routes.
func TestWorkersOverHTTPS(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		certPEM, keyPEM, err := fasthttp.GenerateTestCertificate("localhost")
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		var served atomic.Int32
		for _, addr := range []string{"prefill-0:30000", "decode-0:30010"} {
			ln, err := h.nw.Listen(addr)
			if err != nil {
				t.Fatal(err)
			}
			srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
				served.Add(1)
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"text": "over tls", "data": []}`)
			}}
			go func() { _ = srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
			t.Cleanup(func() { _ = srv.Shutdown() })
		}
		cfg := defaultConfig()
		cfg.Prefill = []PrefillSpec{{URL: "https://prefill-0:30000", BootstrapPort: 8998}}
		cfg.Decode = []string{"https://decode-0:30010"}
		cfg.WorkerTLS = &tls.Config{InsecureSkipVerify: true} // a test certificate
		h.start(cfg)
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || gjson.GetBytes(r.body, "text").String() != "over tls" {
			t.Fatalf("/generate got %d %s", r.status, r.body)
		}
		if r := h.do(fasthttp.MethodGet, "/v1/models", ""); r.status != fasthttp.StatusOK {
			t.Fatalf("/v1/models got %d %s", r.status, r.body)
		}
		// The prefill's leg may end after the decode has answered.
		waitFor(t, "both legs and the info call over TLS", func() bool { return served.Load() == 3 })
	})
}
