package fake

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// clock is a fake Config.Now that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time           { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *clock) config(cfg Config) Config { cfg.Now = c.now; return cfg }
func infoQuery(dp, cp, tp, pp string) string {
	return "/route?prefill_dp_rank=" + dp + "&prefill_cp_rank=" + cp + "&target_tp_rank=" + tp + "&target_pp_rank=" + pp
}

type bootstrapCase struct {
	method, path string
	status       int
	body         string
}

func checkBootstrap(t *testing.T, n *Network, addr string, cases []bootstrapCase) {
	t.Helper()
	for _, c := range cases {
		res := do(t, n, c.method, addr, c.path, "")
		if res.status != c.status || res.body != c.body {
			t.Errorf("%s %s: got %d %q; want %d %q", c.method, c.path, res.status, res.body, c.status, c.body)
		}
	}
}

func TestBootstrapServer(t *testing.T) {
	clk := newClock()
	n := NewNetwork()
	p := startServer(t, n, "prefill:30000", clk.config(Config{Role: RolePrefill, DPSize: 2, RegisterDelay: time.Minute}))
	const notRegistered = "Prefill server not fully registered yet (0 workers registered)."
	checkBootstrap(t, n, "prefill:8998", []bootstrapCase{
		{"GET", "/health", 200, "OK"},
		{"GET", infoQuery("-1", "-1", "-1", "-1"), 503, notRegistered},
		{"GET", infoQuery("0", "0", "0", "0"), 503, notRegistered},
		{"GET", "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1", 400, "Missing inputs for bootstrap server."},
		{"GET", infoQuery("", "-1", "-1", "-1"), 400, "Missing inputs for bootstrap server."},
		{"PUT", "/route", 200, "OK"},
	})
	clk.advance(time.Minute)
	checkBootstrap(t, n, "prefill:8998", []bootstrapCase{
		{"GET", infoQuery("-1", "-1", "-1", "-1"), 200, `{"attn_tp_size":1,"attn_cp_size":1,"dp_size":2,"pp_size":1,"page_size":1,` +
			`"kv_cache_dtype":"auto","follow_bootstrap_room":true,"enable_dsa_cache_layer_split":false,"prefill_http_port":30000,` +
			`"target_tp_rank":null,"target_tp_ranks":null,"target_cp_ranks":null,"target_pp_ranks":null,` +
			`"required_dst_info_num":null,"required_prefill_response_num":null}`},
		{"GET", infoQuery("0", "0", "0", "0"), 200, `{"rank_ip":"prefill","rank_port":8999}`},
		{"GET", infoQuery("1", "0", "0", "0"), 200, `{"rank_ip":"prefill","rank_port":9000}`},
		{"GET", infoQuery("2", "0", "0", "0"), 404, "Bootstrap info not found for dp_rank=2 cp_rank=0 tp_rank=0 pp_rank=0"},
		{"GET", infoQuery("0", "1", "0", "0"), 404, "Bootstrap info not found for dp_rank=0 cp_rank=1 tp_rank=0 pp_rank=0"},
		{"GET", infoQuery("x", "0", "0", "0"), 500, "500 Internal Server Error\n\nServer got itself in trouble"},
		{"GET", "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1", 400, "Missing inputs for bootstrap server."},
		{"GET", "/nope", 404, "404: Not Found"},
	})
	if got := p.Stats().BootstrapRoute; got != 11 {
		t.Errorf("got BootstrapRoute %d; want 11", got)
	}
}

func TestParallelInfoKeys(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "prefill:30000", Config{Role: RolePrefill})
	v := parseJSON(t, do(t, n, "GET", "prefill:8998", infoQuery("-1", "-1", "-1", "-1"), "").body)
	var keys []string
	v.GetObject().Visit(func(k []byte, _ *fastjson.Value) { keys = append(keys, string(k)) })
	want := []string{"attn_tp_size", "attn_cp_size", "dp_size", "pp_size", "page_size", "kv_cache_dtype",
		"follow_bootstrap_room", "enable_dsa_cache_layer_split", "prefill_http_port", "target_tp_rank",
		"target_tp_ranks", "target_cp_ranks", "target_pp_ranks", "required_dst_info_num", "required_prefill_response_num"}
	if got := strings.Join(keys, ","); got != strings.Join(want, ",") {
		t.Errorf("got keys %s; want exactly %s", got, strings.Join(want, ","))
	}
}

func TestOldBootstrapServer(t *testing.T) {
	clk := newClock()
	n := NewNetwork()
	startServer(t, n, "prefill:30000", clk.config(Config{Role: RolePrefill, DPSize: 2, RegisterDelay: time.Minute, OldBootstrapAPI: true}))
	const info = "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
	checkBootstrap(t, n, "prefill:8998", []bootstrapCase{
		{"GET", info, 200, `{"prefill_attn_tp_size":null,"prefill_dp_size":null,"prefill_pp_size":null,"prefill_page_size":null}`},
		{"GET", "/route?engine_rank=0&target_dp_group=1&target_pp_rank=0", 404, "Bootstrap info not Found"},
		{"GET", "/route?engine_rank=-1&target_dp_group=-1", 400, "Missing inputs for bootstrap server."},
		{"GET", infoQuery("-1", "-1", "-1", "-1"), 400, "Missing inputs for bootstrap server."},
	})
	clk.advance(time.Minute)
	checkBootstrap(t, n, "prefill:8998", []bootstrapCase{
		{"GET", info, 200, `{"prefill_attn_tp_size":1,"prefill_dp_size":2,"prefill_pp_size":1,"prefill_page_size":1}`},
		{"GET", "/route?engine_rank=0&target_dp_group=1&target_pp_rank=0", 200, `{"rank_ip":"prefill","rank_port":9000}`},
		{"GET", "/route?engine_rank=0&target_dp_group=2&target_pp_rank=0", 404, "Bootstrap info not Found"},
	})
}

func TestBootstrapOnlyOnPrefill(t *testing.T) {
	d := New(Config{Role: RoleDecode})
	defer d.Close()
	ctx := newCtx("GET", "/health", "")
	d.BootstrapHandler(ctx)
	if got := ctx.Response.StatusCode(); got != 404 {
		t.Errorf("got decode bootstrap status %d; want 404", got)
	}
}

// TestDecodeRetriesUntilRegistered checks that a decode retries a prefill
// that answers 503 until it registers, then caches its info.
func TestDecodeRetriesUntilRegistered(t *testing.T) {
	t.Parallel()
	base := newClock()
	var p *Server
	// The prefill registers once its bootstrap server has been asked twice.
	now := func() time.Time {
		if p != nil && p.Stats().BootstrapRoute >= 2 {
			return base.now().Add(time.Hour)
		}
		return base.now()
	}
	n := NewNetwork()
	p = startServer(t, n, prefillAddr, Config{Role: RolePrefill, RegisterDelay: time.Minute, Now: now})
	d := startServer(t, n, decodeAddr, Config{Role: RoleDecode})
	body := pdBody(`"text":"hi"`, "prefill", "null", 1)
	if pres, dres := both(t, n, "/generate", body, body); pres.status != 200 || dres.status != 200 {
		t.Fatalf("got %d %d; want 200 200: %s %s", pres.status, dres.status, pres.body, dres.body)
	}
	if got, fetched := p.Stats().BootstrapRoute, d.Stats().PrefillInfoFetches; got != 2 || fetched != 1 {
		t.Errorf("got BootstrapRoute %d, PrefillInfoFetches %d; want 2, 1", got, fetched)
	}
}

func TestDecodeReadsOldBootstrapAPI(t *testing.T) {
	n, p, d := newPD(t, Config{OldBootstrapAPI: true}, Config{})
	body := pdBody(`"text":"hi"`, "prefill", "8998", 1)
	if pres, dres := both(t, n, "/generate", body, body); pres.status != 200 || dres.status != 200 {
		t.Fatalf("got %d %d; want 200 200: %s %s", pres.status, dres.status, pres.body, dres.body)
	}
	// The new query gets a 400, the old one the info.
	if got, fetched := p.Stats().BootstrapRoute, d.Stats().PrefillInfoFetches; got != 2 || fetched != 1 {
		t.Errorf("got BootstrapRoute %d, PrefillInfoFetches %d; want 2, 1", got, fetched)
	}
}

func TestPrefillInfoFetchedOncePerAddress(t *testing.T) {
	n, p, d := newPD(t, Config{}, Config{})
	p2 := startServer(t, n, "prefill2:30000", Config{Role: RolePrefill})
	for i, host := range []string{"prefill", "prefill", "PREFILL", "prefill2", "prefill2"} {
		body := pdBody(`"text":"hi"`, host, "8998", uint64(i))
		addr := prefillAddr
		if host == "prefill2" {
			addr = "prefill2:30000"
		}
		pres, dres := bothTo(t, n, addr, "/generate", body, body)
		if pres.status != 200 || dres.status != 200 {
			t.Fatalf("request %d: got %d %d; want 200 200: %s", i, pres.status, dres.status, dres.body)
		}
	}
	if got := [3]uint64{p.Stats().BootstrapRoute, p2.Stats().BootstrapRoute, d.Stats().PrefillInfoFetches}; got != [3]uint64{1, 1, 2} {
		t.Errorf("got route hits on both prefills and decode fetches %v; want [1 1 2]", got)
	}
}

// /query_dp_ranks answers the ranks /register_dp_rank gave rooms, for the
// rooms asked that have one, as SGLang's bootstrap server does; it
// answered {} to all.
func TestRoomDPRanks(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	startServer(t, n, prefillAddr, Config{Role: RolePrefill, DPSize: 4})
	if res := do(t, n, "POST", "prefill:8998", "/register_dp_rank", `{"bootstrap_room": 7, "dp_rank": 3}`); res.status != 200 {
		t.Fatalf("register: got %d %s", res.status, res.body)
	}
	if res := do(t, n, "POST", "prefill:8998", "/query_dp_ranks", `{"bootstrap_rooms": [7, 8]}`); res.status != 200 || res.body != `{"7":3}` {
		t.Errorf("query: got %d %s; want 200 {\"7\":3}", res.status, res.body)
	}
	if res := do(t, n, "POST", "prefill:8998", "/register_dp_rank", `{"bootstrap_room": "x"}`); res.status != 400 {
		t.Errorf("a bad registration: got %d %s; want 400", res.status, res.body)
	}
}
