package fake

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestServerInfo(t *testing.T) {
	n := NewNetwork()
	for _, c := range []struct {
		role      Role
		addr      string
		wantMode  string
		wantFirst string
	}{
		{RolePrefill, "p:30000", `"prefill"`, `{"last_gen_throughput":0.0,"avg_spec_accept_length":null,"dp_rank":0}`},
		{RoleDecode, "d:30001", `"decode"`, ""},
		{RoleAggregated, "a:30002", `"null"`, ""},
	} {
		startServer(t, n, c.addr, Config{Role: c.role, DPSize: 3, BootstrapPort: 9100})
		for _, path := range []string{"/server_info", "/get_server_info"} {
			res := do(t, n, "GET", c.addr, path, "")
			v := parseJSON(t, res.body)
			port := strings.Split(c.addr, ":")[1]
			got := str(v, "disaggregation_mode") + " " + str(v, "disaggregation_bootstrap_port") + " " +
				str(v, "dp_size") + " " + str(v, "tp_size") + " " + str(v, "model_path") + " " + str(v, "port")
			if want := c.wantMode + ` 9100 3 1 "fake-model" ` + port; got != want {
				t.Errorf("%s %s: got %s; want %s", c.role, path, got, want)
			}
			if states := v.GetArray("internal_states"); len(states) != 3 {
				t.Errorf("%s: got %d internal states; want 3", c.role, len(states))
			}
			if c.wantFirst != "" && !strings.Contains(res.body, c.wantFirst) {
				t.Errorf("got %s; want it to contain %s", res.body, c.wantFirst)
			}
		}
	}
}

func TestModelRoutes(t *testing.T) {
	n := NewNetwork()
	s := startServer(t, n, "a:30000", Config{Model: "org/m"})
	for _, path := range []string{"/model_info", "/get_model_info"} {
		v := parseJSON(t, do(t, n, "GET", "a:30000", path, "").body)
		if got := str(v, "model_path") + str(v, "tokenizer_path") + str(v, "is_generation"); got != `"org/m""org/m"true` {
			t.Errorf("%s: got %s", path, got)
		}
	}
	v := parseJSON(t, do(t, n, "GET", "a:30000", "/v1/models", "").body)
	m := v.Get("data", "0")
	got := str(v, "object") + " " + str(m, "id") + " " + str(m, "object") + " " + str(m, "owned_by") + " " + str(m, "root") + " " + str(m, "parent")
	if want := `"list" "org/m" "model" "sglang" "org/m" null`; got != want || m.Get("created") == nil || m.Get("max_model_len") == nil {
		t.Errorf("got /v1/models %s; want %s with created and max_model_len", got, want)
	}
	if got := s.Stats().ModelInfo; got != 3 {
		t.Errorf("got ModelInfo %d; want 3", got)
	}
}

func TestFlushCache(t *testing.T) {
	n := NewNetwork()
	s := startServer(t, n, "a:30000", Config{})
	if res := do(t, n, "POST", "a:30000", "/flush_cache?timeout=7.5", ""); res.status != 200 {
		t.Errorf("got status %d; want 200", res.status)
	}
	if st := s.Stats(); st.FlushCache != 1 || st.FlushCacheTimeout != "7.5" {
		t.Errorf("got FlushCache %d, timeout %q; want 1, %q", st.FlushCache, st.FlushCacheTimeout, "7.5")
	}
	do(t, n, "POST", "a:30000", "/flush_cache", "")
	if st := s.Stats(); st.FlushCache != 2 || st.FlushCacheTimeout != "" {
		t.Errorf("got FlushCache %d, timeout %q; want 2, \"\"", st.FlushCache, st.FlushCacheTimeout)
	}
}

func TestHealthWhileStarting(t *testing.T) {
	clk := newClock()
	n := NewNetwork()
	s := startServer(t, n, "a:30000", clk.config(Config{StartDelay: time.Minute}))
	for _, path := range []string{"/health", "/health_generate"} {
		if res := do(t, n, "GET", "a:30000", path, ""); res.status != 503 {
			t.Errorf("%s while starting: got %d; want 503", path, res.status)
		}
	}
	clk.advance(time.Minute)
	for _, path := range []string{"/health", "/health_generate"} {
		if res := do(t, n, "GET", "a:30000", path, ""); res.status != 200 || res.body != "" {
			t.Errorf("%s: got %d %q; want 200 and an empty body", path, res.status, res.body)
		}
	}
	if got := s.Stats().Health; got != 4 {
		t.Errorf("got Health %d; want 4", got)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	n := NewNetwork()
	s := startServer(t, n, "a:30000", Config{})
	if res := do(t, n, "GET", "a:30000", "/nope", ""); res.status != 404 || res.body != `{"detail":"Not Found"}` {
		t.Errorf("got %d %s; want 404", res.status, res.body)
	}
	if res := do(t, n, "GET", "a:30000", "/generate", ""); res.status != 405 {
		t.Errorf("got GET /generate %d; want 405", res.status)
	}
	if got := s.Stats().Other; got != 1 {
		t.Errorf("got Other %d; want 1", got)
	}
}

// TestAbortRequest aborts a decode request while it fetches its prefill's
// info from a bootstrap server that never answers.
func TestAbortRequest(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	arrived := make(chan struct{}, 1)
	hold := make(chan struct{})
	defer close(hold)
	serveFunc(t, n, "stuck:8998", func(ctx *fasthttp.RequestCtx) {
		arrived <- struct{}{}
		<-hold
	})
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode})
	answer := make(chan result, 1)
	go func() {
		res, err := roundTrip(n, "POST", decodeAddr, "/generate", pdBody(`"text":"hi","rid":"r9"`, "stuck", "8998", 1))
		if err != nil {
			res.body = err.Error()
		}
		answer <- res
	}()
	within(t, arrived, "the decode to ask the bootstrap server")
	if res := do(t, n, "POST", decodeAddr, "/abort_request", `{"rid":"r9"}`); res.status != 200 {
		t.Errorf("got abort status %d; want 200", res.status)
	}
	res := within(t, answer, "the aborted request's answer")
	fr := parseJSON(t, res.body).Get("meta_info", "finish_reason")
	if got := str(fr, "type") + " " + str(fr, "status_code"); res.status != 200 || got != `"abort" null` {
		t.Errorf("got %d %s; want 200 and an abort finish_reason without status: %s", res.status, got, res.body)
	}
	if st := d.Stats(); st.Aborts != 1 || st.AbortRequest != 1 || st.InFlight != 0 {
		t.Errorf("got Aborts %d, AbortRequest %d, InFlight %d; want 1, 1, 0", st.Aborts, st.AbortRequest, st.InFlight)
	}
}

// A request header up to MaxHeaderSize is read, as uvicorn reads up to
// h11's 16 KiB; a larger one is refused.
func TestMaxHeaderSize(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	for _, c := range []struct {
		size, status int
	}{{8 << 10, fasthttp.StatusOK}, {DefaultMaxHeaderSize + 1024, fasthttp.StatusRequestHeaderFieldsTooLarge}} {
		conn, err := n.Dial("agg:30000")
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(testDeadline))
		req := "GET /health HTTP/1.1\r\nHost: agg\r\nX-Big: " + strings.Repeat("b", c.size) + "\r\n\r\n"
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		var resp fasthttp.Response
		err = resp.Read(bufio.NewReader(conn))
		conn.Close()
		if err != nil || resp.StatusCode() != c.status {
			t.Errorf("a %d-byte header got %d (%v); want %d", c.size, resp.StatusCode(), err, c.status)
		}
	}
}

// TestAPIKey checks SGLang's --api-key rules: every route but OPTIONS,
// /health* and /metrics needs the bearer key.
func TestAPIKey(t *testing.T) {
	s := New(Config{APIKey: "k1"})
	for _, c := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/generate", "", fasthttp.StatusUnauthorized},
		{"POST", "/generate", "Bearer k2", fasthttp.StatusUnauthorized},
		{"POST", "/generate", "k1", fasthttp.StatusUnauthorized},
		{"POST", "/generate", "Bearer k1", fasthttp.StatusOK},
		{"GET", "/v1/models", "", fasthttp.StatusUnauthorized},
		{"POST", "/flush_cache", "", fasthttp.StatusUnauthorized},
		{"GET", "/health", "", fasthttp.StatusOK},
		{"GET", "/health_generate", "", fasthttp.StatusOK},
	} {
		ctx := newCtx(c.method, c.path, `{"text":"a","sampling_params":{"max_new_tokens":1}}`)
		if c.auth != "" {
			ctx.Request.Header.Set("Authorization", c.auth)
		}
		s.Handler(ctx)
		if got := ctx.Response.StatusCode(); got != c.want {
			t.Errorf("%s %s with %q: got %d %s; want %d", c.method, c.path, c.auth, got, ctx.Response.Body(), c.want)
		}
		if c.want == fasthttp.StatusUnauthorized && string(ctx.Response.Body()) != `{"error":"Unauthorized"}` {
			t.Errorf("%s %s: got body %s; want SGLang's", c.method, c.path, ctx.Response.Body())
		}
	}
	if got := s.Stats().Unauthorized; got != 5 {
		t.Errorf("got %d unauthorized; want 5", got)
	}
}
