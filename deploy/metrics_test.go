package deploy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/lb"
)

// startFake starts a fake SGLang server of role on n at addr.
func startFake(t *testing.T, n *fake.Network, addr string, role fake.Role) *fake.Server {
	t.Helper()
	s := fake.New(fake.Config{Role: role, KVTimeout: 5 * time.Second})
	if err := s.Start(n, addr); err != nil {
		t.Fatalf("cannot start fake %s on %s: %s", role, addr, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// servedMetrics runs pdlb in memory in front of a fake prefill, decode and
// fallback, sends it the traffic that makes its lazily created series (a
// stream, a chat completion, a decode-only request, a 5xx), and parses its
// /metrics page. Its prefill policy is prefix_hash, as the Deployment's, and
// its decode policy cache_aware, so that both policies' series are there.
func servedMetrics(t *testing.T) exposition {
	t.Helper()
	n := fake.NewNetwork()
	startFake(t, n, "prefill-0:30000", fake.RolePrefill)
	startFake(t, n, "decode-0:30000", fake.RoleDecode)
	fallback := startFake(t, n, "agg-0:30000", fake.RoleAggregated)
	srv, err := lb.New(lb.Config{
		Prefill:       []lb.PrefillSpec{{URL: "http://prefill-0:30000", BootstrapPort: 8998}},
		Decode:        []string{"http://decode-0:30000"},
		Fallback:      []string{"http://agg-0:30000"},
		PrefillPolicy: lb.PolicyPrefixHash,
		DecodePolicy:  lb.PolicyCacheAware,
		HealthCheck:   lb.HealthCheckConfig{Disable: true},
		Dial:          n.Dial,
	}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := n.Listen("pdlb:8000")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	cl := &fasthttp.HostClient{Addr: "pdlb:8000", Dial: func(string) (net.Conn, error) { return n.Dial("pdlb:8000") }}
	t.Cleanup(func() {
		cl.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %s", err)
		}
		<-served
	})
	const prompt = `"text":"The same system prompt, then a question","sampling_params":{"max_new_tokens":4}`
	call(t, cl, "/generate", `{`+prompt+`,"stream":true}`, nil, fasthttp.StatusOK)
	call(t, cl, "/generate", `{`+prompt+`}`, nil, fasthttp.StatusOK)
	call(t, cl, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, nil, fasthttp.StatusOK)
	decodeOnly := map[string]string{"X-PD-Mode": "decode-only"}
	call(t, cl, "/generate", `{`+prompt+`}`, decodeOnly, fasthttp.StatusOK)
	if err := fallback.SetFault(fake.Fault{Kind: fake.FaultError, Status: fasthttp.StatusInternalServerError}); err != nil {
		t.Fatal(err)
	}
	call(t, cl, "/generate", `{`+prompt+`}`, decodeOnly, fasthttp.StatusInternalServerError)
	page := call(t, cl, "/metrics", "", nil, fasthttp.StatusOK)
	e, err := parseExposition(page)
	if err != nil {
		t.Fatalf("pdlb's /metrics: %s", err)
	}
	return e
}

// call sends body (a GET when empty) to path on cl with header, checks the
// status, and returns the answer's body.
func call(t *testing.T, cl *fasthttp.HostClient, path, body string, header map[string]string, status int) string {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://pdlb:8000" + path)
	if body != "" {
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if err := cl.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s: %s", path, err)
	}
	if resp.StatusCode() != status {
		t.Fatalf("%s %s: got %d %q; want %d", path, body, resp.StatusCode(), resp.Body(), status)
	}
	return string(resp.Body())
}

// TestQueriesReadSeriesPDLBServes: every series the dashboard and the
// alerts query is one pdlb serves after some traffic, with the labels and
// label values they match on, so no panel stays empty and no alert is
// silently never true for a misspelled name (issue 24 §2).
func TestQueriesReadSeriesPDLBServes(t *testing.T) {
	e := servedMetrics(t)
	qs := append(dashboardQueries(t, "grafana/pdlb.json"), alertQueries(t, "prometheus/alerts.yaml")...)
	if len(qs) < 30 {
		t.Fatalf("got %d queries from the dashboard and the alerts; want them all (30 or more)", len(qs))
	}
	for _, q := range qs {
		for _, p := range checkQuery(q, e) {
			t.Error(p)
		}
	}
}

// TestCheckQueryFindsWrongNames shows checkQuery can fail: each query is
// one of the dashboard's or alerts' kind with one thing wrong.
func TestCheckQueryFindsWrongNames(t *testing.T) {
	e, err := parseExposition(strings.Join([]string{
		`pdlb_requests_total{route="/generate",code="200"} 3`,
		`pdlb_backend_up{role="prefill",backend="p:1"} 1`,
		`pdlb_request_duration_seconds_bucket{route="/generate",le="0.1"} 2`,
	}, "\n") + "\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr, want string
	}{
		{`sum(rate(pdlb_requests_total{instance=~".*"}[5m]))`, ""},
		{`histogram_quantile(0.9, sum by (route, le) (rate(pdlb_request_duration_seconds_bucket[5m])))`, ""},
		{`sum(rate(pdlb_request_total[5m]))`, "pdlb serves no series pdlb_request_total"},
		{`pdlb_backend_up{role="decod"} == 0`, `no series pdlb_backend_up has role="decod"`},
		{`pdlb_requests_total{code=~"5.."}`, `no series pdlb_requests_total has code=~"5.."`},
		{`sum by (rout) (pdlb_requests_total)`, `has the label "rout"`},
		{`sum(rate(pdlb_requests_total[5m]) / `, "parse error"},
	} {
		problems := strings.Join(checkQuery(query{"test", tc.expr}, e), "\n")
		if tc.want == "" && problems != "" || !strings.Contains(problems, tc.want) {
			t.Errorf("checkQuery(%q) = %q; want %q", tc.expr, problems, tc.want)
		}
	}
}
