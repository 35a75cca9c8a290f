package lb

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

const adminAuth = "Bearer admin-key"

// adminConfig is defaultConfig with an admin key, which opens the worker
// API to the harness's in-memory clients.
func adminConfig() Config {
	cfg := defaultConfig()
	cfg.AdminAPIKey = "admin-key"
	return cfg
}

// workerOf returns the worker of a GET /workers answer whose url is u.
func workerOf(t *testing.T, list []byte, u string) gjson.Result {
	t.Helper()
	return gjson.GetBytes(list, `workers.#(url=="`+u+`")`)
}

// TestWorkerAPIAddsListsAndRemoves adds a decode through POST /workers and
// sees it take requests; lists and gets it; deletes it while a request is
// in flight on it and sees it drain, then leave the list (issue 23 §2).
func TestWorkerAPIAddsListsAndRemoves(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		gate := make(chan struct{})
		d1 := h.fake("decode-1:30010", fake.Config{Role: fake.RoleDecode, TokenGate: gate, Tokens: 1})
		h.start(adminConfig())
		const d1URL = "http://decode-1:30010"
		id := workerID(roleDecode, d1URL)

		r := h.post(workersPath, `{"url": "http://decode-1:30010/", "worker_type": "decode", "priority": 10}`, "Authorization", adminAuth)
		if r.status != fasthttp.StatusAccepted || gjson.GetBytes(r.body, "status").String() != "accepted" ||
			gjson.GetBytes(r.body, "worker_id").String() != id || gjson.GetBytes(r.body, "url").String() != d1URL ||
			string(r.header.Peek("Location")) != "/workers/"+id {
			t.Fatalf("POST /workers: got %d %s, Location %q; want 202 accepted, worker_id %s", r.status, r.body, r.header.Peek("Location"), id)
		}
		if r := h.post(workersPath, `{"url": "http://decode-1:30010", "worker_type": "decode"}`, "Authorization", adminAuth); r.status != fasthttp.StatusConflict ||
			!strings.Contains(string(r.body), id) {
			t.Errorf("POST of a member again: got %d %s; want 409 naming its id", r.status, r.body)
		}

		list := h.do(fasthttp.MethodGet, workersPath, "", "Authorization", adminAuth)
		if list.status != fasthttp.StatusOK || gjson.GetBytes(list.body, "total").Int() != 3 ||
			gjson.GetBytes(list.body, "stats.decode_count").Int() != 2 || gjson.GetBytes(list.body, "stats.prefill_count").Int() != 1 {
			t.Errorf("GET /workers: got %d %s; want 3 workers, 1 prefill and 2 decodes", list.status, list.body)
		}
		w := workerOf(t, list.body, d1URL)
		if w.Get("id").String() != id || w.Get("worker_type").String() != "decode" || w.Get("status").String() != "ready" ||
			w.Get("health").String() != "unknown" || w.Get("breaker").String() != "closed" || w.Get("draining").Bool() ||
			!w.Get("inflight").Exists() {
			t.Errorf("GET /workers: decode-1 is %s; want it ready, not probed yet, breaker closed, not draining", w.Raw)
		}
		if p := workerOf(t, list.body, "http://prefill-0:30000"); p.Get("worker_type").String() != "prefill" || p.Get("id").String() != workerID(rolePrefill, "http://prefill-0:30000") {
			t.Errorf("GET /workers: prefill-0 is %s", p.Raw)
		}

		// decode-0 leaves, named by its URL: decode-1 takes the requests.
		// Sent as curl sends it: fasthttp's client would decode the %2F.
		if status, body := h.sendRaw("DELETE /workers/" + url.PathEscape("http://decode-0:30010") +
			" HTTP/1.1\r\nHost: pdlb\r\nAuthorization: " + adminAuth + "\r\n\r\n"); status != fasthttp.StatusAccepted {
			t.Fatalf("DELETE decode-0 by URL: got %d %s; want 202", status, body)
		}
		done := make(chan reply, 1)
		go func() { r, _ := h.tryDo(fasthttp.MethodPost, "/generate", `{"text": "a"}`); done <- r }()
		synctest.Wait()
		if got := d1.Stats().GenerateRequests; got != 1 {
			t.Fatalf("decode-1 got %d generations; want 1", got)
		}

		r = h.do(fasthttp.MethodDelete, "/workers/"+id, "", "Authorization", adminAuth)
		if r.status != fasthttp.StatusAccepted || gjson.GetBytes(r.body, "worker_id").String() != id {
			t.Fatalf("DELETE decode-1: got %d %s; want 202", r.status, r.body)
		}
		one := h.do(fasthttp.MethodGet, "/workers/"+id, "", "Authorization", adminAuth)
		if one.status != fasthttp.StatusOK || gjson.GetBytes(one.body, "status").String() != "draining" ||
			!gjson.GetBytes(one.body, "draining").Bool() || gjson.GetBytes(one.body, "inflight").Int() != 1 {
			t.Errorf("GET /workers/{id} while it drains: got %d %s; want it draining with 1 in flight", one.status, one.body)
		}
		close(gate)
		if r := <-done; r.status != fasthttp.StatusOK {
			t.Errorf("the request in flight on the removed decode: got %d %s; want 200", r.status, r.body)
		}
		time.Sleep(drainPoll) // the bubble's clock: the drain looks again
		synctest.Wait()
		if r := h.do(fasthttp.MethodGet, "/workers/"+id, "", "Authorization", adminAuth); r.status != fasthttp.StatusNotFound {
			t.Errorf("GET /workers/{id} after its drain: got %d %s; want 404", r.status, r.body)
		}
		list = h.do(fasthttp.MethodGet, workersPath, "", "Authorization", adminAuth)
		if gjson.GetBytes(list.body, "total").Int() != 1 || workerOf(t, list.body, d1URL).Exists() {
			t.Errorf("GET /workers after the drains: got %s; want the prefill alone", list.body)
		}
	})
}

// TestWorkerAPIAuth: the worker API needs the admin key when one is set
// (401 otherwise, wherever the client is); without one, it answers only on
// loopback and the admin listener, and --mini-lb does not open it (403
// saying how to enable it).
func TestWorkerAPIAuth(t *testing.T) {
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 40000}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for _, c := range []struct {
		name     string
		addr     net.Addr
		adminKey string
		open     bool
		auth     string
		want     int
	}{
		{"admin key, none sent", local, "admin-key", false, "", fasthttp.StatusUnauthorized},
		{"admin key, wrong one", local, "admin-key", false, "Bearer client-key", fasthttp.StatusUnauthorized},
		{"admin key, bare", remote, "admin-key", false, "admin-key", fasthttp.StatusUnauthorized},
		{"admin key, remote", remote, "admin-key", false, adminAuth, fasthttp.StatusOK},
		{"no admin key, remote", remote, "", false, "", fasthttp.StatusForbidden},
		{"no admin key, remote, --mini-lb", remote, "", true, "", fasthttp.StatusForbidden},
		{"no admin key, loopback", local, "", false, "", fasthttp.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.wrapListener = func(ln net.Listener) net.Listener { return remoteAddrListener{ln, c.addr} }
				h.pair(fake.Config{}, fake.Config{})
				cfg := defaultConfig()
				cfg.AdminAPIKey, cfg.OpenOperatorRoutes, cfg.APIKey = c.adminKey, c.open, "client-key"
				h.start(cfg)
				id := workerID(roleDecode, "http://decode-0:30010")
				var calls []operatorCall
				for _, m := range [][2]string{{"GET", workersPath}, {"GET", "/workers/" + id}, {"DELETE", "/workers/" + id}} {
					calls = append(calls, operatorCall{m[0], m[1], "", c.auth, c.want})
				}
				post := operatorCall{"POST", workersPath, `{"url": "http://decode-1:30010", "worker_type": "decode"}`, c.auth, c.want}
				if c.want == fasthttp.StatusOK {
					calls[2].want, post.want = fasthttp.StatusAccepted, fasthttp.StatusAccepted
				}
				checkCalls(t, c.name, h.do, append(calls, post))
			})
		})
	}

	// The admin listener stands for an operator when no key is set.
	h, srv, _, _ := operatorHarness(t, defaultConfig())
	checkCalls(t, "admin listener", h.adminListener(srv), []operatorCall{{"GET", workersPath, "", "", fasthttp.StatusOK}})
}

// TestWorkerAPIBadSpecs: a bad worker spec gets a 400 naming the field at
// fault, and adds nothing.
func TestWorkerAPIBadSpecs(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := adminConfig()
		cfg.APIKey = "client-key"
		h.start(cfg)
		for _, c := range []struct{ body, field string }{
			{`{"worker_type": "decode"}`, "url"},
			{`{"url": "", "worker_type": "decode"}`, "url"},
			{`{"url": 7}`, "url"},
			{`{"url": "decode-1:30010"}`, "url"},
			{`{"url": "http://decode-1:30010/v1"}`, "url"},
			{`{"url": "ftp://decode-1:30010"}`, "url"},
			{`{"url": "http://decode-1:30010", "worker_type": "Decode"}`, "worker_type"},
			{`{"url": "http://decode-1:30010", "worker_type": "encode"}`, "worker_type"},
			{`{"url": "http://decode-1:30010", "worker_type": null}`, "worker_type"},
			{`{"url": "http://prefill-1:30000", "worker_type": "prefill", "bootstrap_port": 70000}`, "bootstrap_port"},
			{`{"url": "http://prefill-1:30000", "worker_type": "prefill", "bootstrap_port": "8998"}`, "bootstrap_port"},
			{`{"url": "http://prefill-1:30000", "worker_type": "prefill", "bootstrap_port": 89.5}`, "bootstrap_port"},
			{`{"url": "http://prefill-1:30000", "worker_type": "prefill", "bootstrap_port": 0}`, "bootstrap_port"},
			{`{"url": "http://decode-1:30010", "api_key": "another-key"}`, "api_key"},
			{`{"url": "http://decode-1:30010", "worker_typ": "decode"}`, "worker_typ"},
			{`{"url": "http://decode-1:30010", "url": "http://decode-2:30010"}`, "url"},
			{`not json`, "body"},
			{`["http://decode-1:30010"]`, "body"},
			{``, "body"},
		} {
			r := h.post(workersPath, c.body, "Authorization", adminAuth)
			msg := gjson.GetBytes(r.body, "error.message").String()
			if r.status != fasthttp.StatusBadRequest || !strings.HasPrefix(msg, "invalid worker spec: "+c.field+": ") {
				t.Errorf("%s: got %d %s; want 400 naming %s", c.body, r.status, r.body, c.field)
			}
		}
		if n := gjson.GetBytes(h.do(fasthttp.MethodGet, workersPath, "", "Authorization", adminAuth).body, "total").Int(); n != 2 {
			t.Errorf("after bad specs: %d workers; want 2", n)
		}
		// The key pdlb sends its workers is a spec's to give, as is null.
		r := h.post(workersPath, `{"url": "http://decode-1:30010", "worker_type": "decode", "api_key": "client-key"}`, "Authorization", adminAuth)
		if r.status != fasthttp.StatusAccepted {
			t.Errorf("a spec giving pdlb's --api-key: got %d %s; want 202", r.status, r.body)
		}
		for _, path := range []string{"/workers/not-an-id", "/workers/"} {
			if r := h.do(fasthttp.MethodGet, path, "", "Authorization", adminAuth); r.status != fasthttp.StatusBadRequest ||
				!strings.Contains(string(r.body), "invalid worker_id") {
				t.Errorf("GET %s: got %d %s; want 400 naming the worker_id", path, r.status, r.body)
			}
		}
		if r := h.do(fasthttp.MethodGet, "/workers/"+workerID(roleDecode, "http://nowhere:1"), "", "Authorization", adminAuth); r.status != fasthttp.StatusNotFound {
			t.Errorf("GET of an unknown id: got %d %s; want 404", r.status, r.body)
		}
		if r := h.do(fasthttp.MethodPut, workersPath, "{}", "Authorization", adminAuth); r.status != fasthttp.StatusMethodNotAllowed ||
			string(r.header.Peek("Allow")) != "GET, POST" {
			t.Errorf("PUT /workers: got %d %s, Allow %q; want 405 allowing GET, POST", r.status, r.body, r.header.Peek("Allow"))
		}
	})
}

// TestWorkerAPIAddsAPrefill: a prefill POSTed joins at run time, followed
// by the bootstrap registry on the port given, and serves.
func TestWorkerAPIAddsAPrefill(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		p1 := h.fake("prefill-1:30000", fake.Config{Role: fake.RolePrefill, BootstrapPort: 9001, KVTimeout: 5 * time.Second})
		srv := h.start(adminConfig())
		r := h.post(workersPath, `{"url": "http://prefill-1:30000", "worker_type": "prefill", "bootstrap_port": 9001}`, "Authorization", adminAuth)
		if r.status != fasthttp.StatusAccepted {
			t.Fatalf("POST of a prefill: got %d %s; want 202", r.status, r.body)
		}
		if _, err := srv.removeWorker(rolePrefill, "http://prefill-0:30000", sourceAll); err != nil {
			t.Fatal(err)
		}
		b := srv.prefills.find("http://prefill-1:30000")
		synctest.Wait()
		if b == nil || srv.registry.State(b.index).Port != 9001 {
			t.Fatalf("the prefill POSTed is not followed on its bootstrap port 9001")
		}
		if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK || p1.Stats().GenerateRequests != 1 {
			t.Errorf("through the prefill POSTed: got %d %s; want 200", r.status, r.body)
		}
	})
}

// TestWorkerID: a worker's id is the v5 UUID of its type and URL, as
// Python's uuid.uuid5(uuid.NAMESPACE_URL, "decode http://decode-1:30010")
// gives it.
func TestWorkerID(t *testing.T) {
	if got, want := workerID(roleDecode, "http://decode-1:30010"), "0199f342-e3c4-5c07-9f8b-f81afe546a10"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
	if workerID(roleFallback, "http://w:1") == workerID(roleDecode, "http://w:1") {
		t.Error("a URL in two pools has one id")
	}
	if !isUUID(workerID(rolePrefill, "http://p:1")) || isUUID("0199f342-e3c4-5c07-9f8b-f81afe546a1g") {
		t.Error("isUUID is wrong")
	}
}

// The worker API refuses pdlb itself as a worker (it would call itself
// without end, taking every descriptor), however the address is written,
// and a worker another pool has, naming it (issue 23 §2; found trying the
// build as a new user).
func TestWorkerAPIRefusesItselfAndAnotherPoolsWorker(t *testing.T) {
	srv, err := New(defaultConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	})
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	cl := &fasthttp.HostClient{Addr: ln.Addr().String()}
	t.Cleanup(cl.CloseIdleConnections)
	post := func(spec string) (int, string) {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://" + ln.Addr().String() + workersPath)
		req.SetBodyString(spec)
		if err := cl.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode(), string(resp.Body())
	}
	for _, u := range []string{"http://127.0.0.1:" + port, "http://localhost:0" + port, "http://0.0.0.0:" + port} {
		if status, body := post(`{"url": "` + u + `", "worker_type": "prefill"}`); status != fasthttp.StatusBadRequest ||
			!strings.Contains(body, "is pdlb itself") {
			t.Errorf("POST of pdlb itself as %s: got %d %s; want 400 saying it is pdlb", u, status, body)
		}
	}
	if status, body := post(`{"url": "http://decode-0:30010", "worker_type": "regular"}`); status != fasthttp.StatusConflict ||
		!strings.Contains(body, "already a decode worker, http://decode-0:30010, with id "+workerID(roleDecode, "http://decode-0:30010")) {
		t.Errorf("POST of a decode as regular: got %d %s; want 409 naming the decode and its id", status, body)
	}
}

// A worker spec over a control route's bound is refused naming that bound,
// not --max-payload-size, which it is not.
func TestWorkerAPIBodyTooLarge(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		h.start(adminConfig())
		big := `{"url": "http://decode-1:30010", "worker_type": "decode", "labels": {"x": "` + strings.Repeat("a", maxControlBody) + `"}}`
		r := h.post(workersPath, big, "Authorization", adminAuth)
		if r.status != fasthttp.StatusRequestEntityTooLarge || !strings.Contains(string(r.body), "bytes allowed on this route") ||
			strings.Contains(string(r.body), "--max-payload-size") {
			t.Errorf("a spec over %d bytes: got %d %s; want 413 naming the route's bound", maxControlBody, r.status, r.body)
		}
	})
}
