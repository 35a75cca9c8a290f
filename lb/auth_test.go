package lb

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/bootstrap"
)

// With an API key, pdlb presents it to workers that require it on every
// call it makes: both legs of a generation, the warm-up, the /server_info
// that tells a prefill's bootstrap port, the info routes, /flush_cache and
// health probes. Clients must present it on the generate routes,
// /flush_cache and /abort_request, and only there.
func TestAPIKey(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		const key = "k-31"
		p, d := h.pair(fake.Config{APIKey: key}, fake.Config{APIKey: key})
		cfg := warmConfig()
		cfg.APIKey = key
		cfg.OpenOperatorRoutes = true // --api-key's rules, as mini_lb's: operator_test.go has --admin-api-key's
		cfg.Prefill[0].BootstrapPort = 0
		cfg.HealthCheck = HealthCheckConfig{Timeout: time.Second, Path: "/v1/models"}
		srv := h.start(cfg)
		h.waitBootstrap()
		if st := srv.registry.State(0); st.PortSource != bootstrap.PortFromServerInfo || st.Port != fake.DefaultBootstrapPort {
			t.Fatalf("got bootstrap port %d from %q; want %d from /server_info", st.Port, st.PortSource, fake.DefaultBootstrapPort)
		}
		waitFirstRound(t, srv)
		for _, b := range srv.allBackends() {
			if !b.available() {
				t.Fatalf("%s %s is out of selection: its probes failed", b.role, b.addr)
			}
		}

		body := `{"text": "a", "sampling_params": {"max_new_tokens": 2}}`
		for _, c := range []struct {
			method, path, auth string
			want               int
		}{
			{"POST", "/generate", "", fasthttp.StatusUnauthorized},
			{"POST", "/generate", "Bearer k-32", fasthttp.StatusUnauthorized},
			{"POST", "/generate", key, fasthttp.StatusUnauthorized},
			{"POST", "/v1/completions", "", fasthttp.StatusUnauthorized},
			{"POST", "/v1/chat/completions", "", fasthttp.StatusUnauthorized},
			{"POST", "/flush_cache", "", fasthttp.StatusUnauthorized},
			{"POST", "/abort_request", "", fasthttp.StatusUnauthorized},
			{"POST", "/generate", "Bearer " + key, fasthttp.StatusOK},
			// With a timeout: a worker still finishing the generation above
			// would refuse to flush, as SGLang's does.
			{"POST", "/flush_cache?timeout=5", "Bearer " + key, fasthttp.StatusOK},
			{"GET", "/health", "", fasthttp.StatusOK},
			{"GET", "/health_generate", "", fasthttp.StatusOK},
			{"GET", "/v1/models", "", fasthttp.StatusOK},
			{"GET", "/model_info", "", fasthttp.StatusOK},
			{"GET", "/server_info", "", fasthttp.StatusOK},
		} {
			var headers []string
			if c.auth != "" {
				headers = []string{"Authorization", c.auth}
			}
			r := h.do(c.method, c.path, body, headers...)
			if r.status != c.want {
				t.Errorf("%s %s with %q: got %d %s; want %d", c.method, c.path, c.auth, r.status, r.body, c.want)
				continue
			}
			if c.want == fasthttp.StatusUnauthorized && (gjson.GetBytes(r.body, "error.type").String() != "authentication_error" ||
				string(r.header.Peek("WWW-Authenticate")) != "Bearer") {
				t.Errorf("%s %s: got %s, WWW-Authenticate %q; want an authentication_error asking for a bearer key",
					c.method, c.path, r.body, r.header.Peek("WWW-Authenticate"))
			}
			if c.path == "/server_info" && gjson.GetBytes(r.body, "prefill.0.error").Exists() {
				t.Errorf("/server_info: got %s; want the prefill's own answer", r.body)
			}
		}
		for _, w := range []*fake.Server{p, d} {
			if st := w.Stats(); st.Unauthorized != 0 || st.Generate == 0 || st.ServerInfo == 0 || st.FlushCache != 1 {
				t.Errorf("a worker got %d calls without the key (%d generations, %d /server_info, %d flushes)",
					st.Unauthorized, st.Generate, st.ServerInfo, st.FlushCache)
			}
		}
		if got := srv.errorsByReason[reasonUnauthorized].Get(); got != 7 {
			t.Errorf("got %d unauthorized in the metrics; want 7", got)
		}
	})
}

// A worker that refuses pdlb's own key is a configuration error: the
// client, whose key pdlb checked, gets a 502 that says so, not the
// worker's bare 401; and the worker is not ejected for it.
func TestWorkerRefusingPDLBsKey(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{APIKey: "workers"}, fake.Config{APIKey: "workers"})
		cfg := defaultConfig()
		cfg.APIKey = "pdlb"
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		srv := h.start(cfg)
		for range 3 {
			for _, stream := range []string{"false", "true"} {
				r := h.post("/generate", `{"text": "a", "stream": `+stream+`}`, "Authorization", "Bearer pdlb")
				if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadGateway || !strings.Contains(msg, "refused pdlb's --api-key") {
					t.Fatalf("stream %s: got %d %s; want a 502 saying the worker refused pdlb's key", stream, r.status, r.body)
				}
			}
		}
		for _, b := range srv.allBackends() {
			if !b.available() {
				t.Fatalf("%s %s was ejected for pdlb's key", b.role, b.addr)
			}
		}
		if r := h.post("/flush_cache", "", "Authorization", "Bearer pdlb"); r.status != fasthttp.StatusBadGateway {
			t.Fatalf("/flush_cache: got %d %s; want a 502, not the workers' 401 passed on", r.status, r.body)
		}
	})
}

// Without a key of its own, pdlb forwards the client's Authorization header
// to workers behind a key, on the info and control routes as on the
// generate routes: a client with the key gets their answers, and one
// without gets the workers' refusal, not a 502 blaming a gateway.
func TestClientKeyReachesWorkersOnControlRoutes(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		const key = "k-41"
		p, d := h.pair(fake.Config{APIKey: key}, fake.Config{APIKey: key})
		cfg := defaultConfig()
		cfg.OpenOperatorRoutes = true // mini_lb's open control routes, which this test calls
		h.start(cfg)
		for _, c := range []struct {
			method, path string
			want         int // without the key
		}{
			{"GET", "/v1/models", fasthttp.StatusUnauthorized},
			{"GET", "/get_model_info", fasthttp.StatusUnauthorized},
			{"GET", "/get_server_info", fasthttp.StatusOK}, // a report of each worker's answer
			{"POST", "/flush_cache", fasthttp.StatusUnauthorized},
		} {
			r := h.do(c.method, c.path, "", "Authorization", "Bearer "+key)
			if r.status != fasthttp.StatusOK || strings.Contains(string(r.body), "401") {
				t.Errorf("%s %s with the key: got %d %s; want 200 from the workers", c.method, c.path, r.status, r.body)
			}
			r = h.do(c.method, c.path, "")
			if r.status != c.want || !strings.Contains(string(r.body), "401") && !strings.Contains(string(r.body), "nauthorized") {
				t.Errorf("%s %s without the key: got %d %s; want %d and the workers' refusal", c.method, c.path, r.status, r.body, c.want)
			}
		}
		if pu, du := p.Stats().Unauthorized, d.Stats().Unauthorized; pu == 0 || du == 0 {
			t.Fatalf("the workers refused %d and %d calls; the calls without the key reached neither", pu, du)
		}
	})
}

// SGLang's /server_info answer holds its server_args, api_key included.
// pdlb, which holds the workers' key, hides it on its open info routes; a
// secret that is not set stays null.
func TestServerInfoHidesTheWorkersKeys(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		const key = "k-51"
		h.pair(fake.Config{APIKey: key}, fake.Config{APIKey: key})
		cfg := defaultConfig()
		cfg.APIKey = key
		h.start(cfg)
		for _, path := range []string{"/server_info", "/get_server_info"} {
			r := h.do("GET", path, "")
			if r.status != fasthttp.StatusOK || strings.Contains(string(r.body), key) {
				t.Fatalf("%s: got %d %s; want 200 without the key", path, r.status, r.body)
			}
			for _, role := range []string{"prefill", "decode"} {
				w := gjson.GetBytes(r.body, role+".0")
				if w.Get("api_key").String() != "<redacted>" || w.Get("admin_api_key").Type != gjson.Null || w.Get("dp_size").Int() != 1 {
					t.Fatalf("%s: got the %s's answer %s; want api_key redacted, admin_api_key null, the rest as it was", path, role, w.Raw)
				}
			}
		}
	})
}
