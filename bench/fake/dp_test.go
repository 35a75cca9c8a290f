package fake

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// dpKVTimeout bounds the KV waits of the DP tests: every leg that must fail
// by timeout costs that long, and a leg that must succeed meets well within.
const dpKVTimeout = 300 * time.Millisecond

// seed is the request of the first-request bug report (SGLang PR #22990),
// as a client sends it to mini_lb.
const seed = `{"text": "Hello World How are you?", "sampling_params": {"max_new_tokens": 128, "temperature": 0.0}, ` +
	`"stream": false, "routed_dp_rank": 0, "disagg_prefill_dp_rank": 0}`

// miniLB adds the bootstrap fields to a client body as mini_lb does: its
// dict.update appends them after the client's keys.
func miniLB(body string, room uint64) string {
	return strings.TrimSuffix(body, "}") + `, "bootstrap_host": "prefill", "bootstrap_port": 8998, "bootstrap_room": ` +
		strconv.FormatUint(room, 10) + "}"
}

// ridPattern finds the generated rid in a decode failure message.
var ridPattern = regexp.MustCompile(`decode_req\.req\.rid='([0-9a-f]{32})'`)

// checkDown checks the exact 500 of the first-request bug for room on
// decode DP rank rank.
func checkDown(t *testing.T, res result, room uint64, rank int) {
	t.Helper()
	m := ridPattern.FindStringSubmatch(res.body)
	if res.status != 500 || m == nil {
		t.Fatalf("got %d %s; want the first-request bug's 500", res.status, res.body)
	}
	r := strconv.FormatUint(room, 10)
	msg := "Decode handshake failed for request rank=" + strconv.Itoa(rank) + " decode_req.req.rid='" + m[1] +
		"' decode_req.req.bootstrap_room=" + r + " with exception KVTransferError(bootstrap_room=" + r +
		"): Prefill server with bootstrap_addr: prefill:8998 is healthy before, but now it is down. Request (bootstrap_room: " +
		r + ") has been marked as failed."
	if want := `{"object":"error","message":"` + msg + `","type":"500","param":null,"code":500}`; res.body != want {
		t.Errorf("got %q; want %q", res.body, want)
	}
}

// checkOK checks a 200 whose meta_info.dp_rank is rank.
func checkOK(t *testing.T, leg string, res result, rank int) {
	t.Helper()
	if res.status != 200 {
		t.Fatalf("got %s status %d; want 200: %s", leg, res.status, res.body)
	}
	if got, want := str(parseJSON(t, res.body), "meta_info", "dp_rank"), strconv.Itoa(rank); got != want {
		t.Errorf("got %s dp_rank %s; want %s", leg, got, want)
	}
}

// checkTimedOut checks a prefill that waited for a decode in vain.
func checkTimedOut(t *testing.T, res result, rank int) {
	t.Helper()
	checkServerError(t, "prefill", res, "Prefill bootstrap failed for request rank="+strconv.Itoa(rank)+" req.rid=")
	if !strings.Contains(res.body, "s in KVPoll.Bootstrapping") {
		t.Errorf("got %s; want a timeout in KVPoll.Bootstrapping", res.body)
	}
}

// TestFirstRequestBug replays SGLang PR #22990's report: a decode whose DP
// rank has not cached the prefill's info fails every request carrying
// disagg_prefill_dp_rank until one without it goes through that rank.
func TestFirstRequestBug(t *testing.T) {
	t.Parallel()
	pcfg := Config{DPSize: 4, KVTimeout: dpKVTimeout}
	dcfg := Config{DPSize: 4, FirstRequestBug: true}
	n, p, d := newPD(t, pcfg, dcfg)
	for _, room := range []uint64{101, 9223372036854775807} {
		pres, dres := both(t, n, "/generate", miniLB(seed, room), miniLB(seed, room))
		checkDown(t, dres, room, 0)
		checkTimedOut(t, pres, 0)
	}
	// Decode rank 1 has a table of its own, as empty.
	rank1 := strings.ReplaceAll(seed, `_rank": 0`, `_rank": 1`)
	_, dres := both(t, n, "/generate", miniLB(rank1, 103), miniLB(rank1, 103))
	checkDown(t, dres, 103, 1)
	if st := d.Stats(); st.FirstRequestFailures != 3 || st.PrefillInfoFetches != 0 || p.Stats().BootstrapRoute != 0 {
		t.Errorf("got FirstRequestFailures %d, PrefillInfoFetches %d, BootstrapRoute %d; want 3, 0, 0",
			st.FirstRequestFailures, st.PrefillInfoFetches, p.Stats().BootstrapRoute)
	}

	// A request without the field on decode rank 0 fills rank 0's table.
	fill := miniLB(`{"text": "fill", "routed_dp_rank": 0}`, 104)
	pres, dres := both(t, n, "/generate", fill, fill)
	checkOK(t, "prefill", pres, 0)
	checkOK(t, "decode", dres, 0)
	pres, dres = both(t, n, "/generate", miniLB(seed, 105), miniLB(seed, 105))
	checkOK(t, "prefill", pres, 0)
	checkOK(t, "decode", dres, 0)
	// Rank 1's table is still empty.
	_, dres = both(t, n, "/generate", miniLB(rank1, 107), miniLB(rank1, 107))
	checkDown(t, dres, 107, 1)
	if st := d.Stats(); st.FirstRequestFailures != 4 || st.PrefillInfoFetches != 1 {
		t.Errorf("got FirstRequestFailures %d, PrefillInfoFetches %d; want 4, 1", st.FirstRequestFailures, st.PrefillInfoFetches)
	}

	// A restarted decode starts with empty tables.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = startServer(t, n, decodeAddr, Config{Role: RoleDecode, DPSize: 4, FirstRequestBug: true})
	pres, dres = both(t, n, "/generate", miniLB(seed, 106), miniLB(seed, 106))
	checkDown(t, dres, 106, 0)
	checkTimedOut(t, pres, 0)
	if got := d.Stats().FirstRequestFailures; got != 1 {
		t.Errorf("got FirstRequestFailures %d on the restarted decode; want 1", got)
	}
}

// TestFirstRequestFixed checks the behaviour since PR #22990: the first
// request carrying disagg_prefill_dp_rank fetches the prefill's info.
func TestFirstRequestFixed(t *testing.T) {
	t.Parallel()
	n, _, d := newPD(t, Config{DPSize: 4, KVTimeout: dpKVTimeout}, Config{DPSize: 4})
	pres, dres := both(t, n, "/generate", miniLB(seed, 101), miniLB(seed, 101))
	checkOK(t, "prefill", pres, 0)
	checkOK(t, "decode", dres, 0)
	if st := d.Stats(); st.FirstRequestFailures != 0 || st.PrefillInfoFetches != 1 {
		t.Errorf("got FirstRequestFailures %d, PrefillInfoFetches %d; want 0, 1", st.FirstRequestFailures, st.PrefillInfoFetches)
	}
}

// TestFirstRequestBugStream checks the bug's failure inside streams: the
// /generate chunk with status 500, the OpenAI SSE error event.
func TestFirstRequestBugStream(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	startServer(t, n, decodeAddr, Config{Role: RoleDecode, DPSize: 4, FirstRequestBug: true})
	const tail = "Prefill server with bootstrap_addr: prefill:8998 is healthy before, but now it is down. " +
		"Request (bootstrap_room: 7) has been marked as failed."
	_, evs, err := stream(n, decodeAddr, "/generate", miniLB(strings.Replace(seed, `"stream": false`, `"stream": true`, 1), 7))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1] != "[DONE]" {
		t.Fatalf("got %q; want one chunk and [DONE]", evs)
	}
	fr := parseJSON(t, evs[0]).Get("meta_info", "finish_reason")
	if msg := string(fr.GetStringBytes("message")); str(fr, "status_code") != "500" || !strings.HasSuffix(msg, tail) {
		t.Errorf("got finish_reason %s; want status_code 500 and a message ending %q", fr, tail)
	}
	chat := miniLB(`{"messages": [], "stream": true, "routed_dp_rank": 2, "disagg_prefill_dp_rank": 0}`, 7)
	_, evs, err = stream(n, decodeAddr, "/v1/chat/completions", chat)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || !strings.HasPrefix(evs[0], `{"error":{"object":"error","message":"Decode handshake failed for request rank=2 `) ||
		!strings.HasSuffix(evs[0], tail+`","type":"500","param":null,"code":500}}`) {
		t.Errorf("got %q; want the bug's SSE error event and [DONE]", evs)
	}
}

func TestDPConflict(t *testing.T) {
	t.Parallel()
	const conflict = `{"object":"error","message":"Prefill bootstrap failed for request rank=1 req.rid='r1' req.bootstrap_room=8 ` +
		`with exception KVTransferError(bootstrap_room=8): follow_bootstrap_room conflict: dispatched to dp_rank 1 but ` +
		`bootstrap_room 8 implies dp_rank 0. Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing.",` +
		`"type":"500","param":null,"code":500}`
	cfg := Config{DPSize: 4, KVTimeout: dpKVTimeout}
	n, p, d := newPD(t, cfg, cfg)
	pres, dres := both(t, n, "/generate", miniLB(`{"text":"hi","rid":"r1","routed_dp_rank":1}`, 8),
		miniLB(`{"text":"hi","rid":"r1","routed_dp_rank":1}`, 8))
	if pres.status != 500 || pres.body != conflict {
		t.Errorf("got prefill %d %q; want 500 %q", pres.status, pres.body, conflict)
	}
	// The decode waits for rank 0, which never got the request.
	checkServerError(t, "decode", dres, "Decode transfer failed for request rank=1 decode_req.req.rid='r1'")
	if st := p.Stats(); st.DPConflicts != 1 || st.KVTransfersFailed != 1 {
		t.Errorf("got DPConflicts %d, KVTransfersFailed %d; want 1, 1", st.DPConflicts, st.KVTransfersFailed)
	}

	// With disagg_prefill_dp_rank there is no check, and the decode told
	// the same rank meets it.
	told := miniLB(`{"text":"hi","routed_dp_rank":1,"disagg_prefill_dp_rank":1}`, 12)
	pres, dres = both(t, n, "/generate", told, told)
	checkOK(t, "prefill", pres, 1)
	checkOK(t, "decode", dres, 1)
	// A routed rank that agrees with the room is no conflict either.
	agrees := miniLB(`{"text":"hi","routed_dp_rank":2}`, 6)
	pres, dres = both(t, n, "/generate", agrees, agrees)
	checkOK(t, "prefill", pres, 2)
	checkOK(t, "decode", dres, 2)

	_, evs, err := stream(n, prefillAddr, "/generate", miniLB(`{"text":"hi","rid":"r1","routed_dp_rank":1,"stream":true}`, 8))
	if err != nil {
		t.Fatal(err)
	}
	fr := parseJSON(t, evs[0]).Get("meta_info", "finish_reason")
	if want := str(parseJSON(t, conflict), "message"); str(fr, "message") != want || str(fr, "status_code") != "500" {
		t.Errorf("got stream finish_reason %s; want status_code 500 and message %s", fr, want)
	}
	if got := p.Stats().DPConflicts; got != 2 || d.Stats().DPConflicts != 0 {
		t.Errorf("got prefill DPConflicts %d, decode %d; want 2, 0", got, d.Stats().DPConflicts)
	}
}

// TestDPRankMismatch sends a decode a prefill DP rank that is not the one
// the prefill served: neither leg ever meets the other, in process or over
// HTTP.
func TestDPRankMismatch(t *testing.T) {
	t.Parallel()
	for _, crossProcess := range []bool{false, true} {
		cfg := Config{DPSize: 4, KVTimeout: dpKVTimeout}
		n, p, d := newPD(t, cfg, cfg)
		if crossProcess {
			n.removePrefill(p.regKeys, p)
		}
		pbody := miniLB(`{"text":"hi","rid":"r1","routed_dp_rank":2,"disagg_prefill_dp_rank":2}`, 5)
		pres, dres := both(t, n, "/generate", pbody, miniLB(`{"text":"hi","rid":"r1","disagg_prefill_dp_rank":1}`, 5))
		checkTimedOut(t, pres, 2)
		checkServerError(t, "decode", dres, "Decode transfer failed for request rank=0 decode_req.req.rid='r1' "+
			"decode_req.req.bootstrap_room=5 with exception KVTransferError(bootstrap_room=5): Request 5 timed out after ")
		checkKV(t, p, 0, 1)
		checkKV(t, d, 0, 1)

		// The same rank on both legs meets.
		pres, dres = both(t, n, "/generate", pbody, miniLB(`{"text":"hi","disagg_prefill_dp_rank":2}`, 5))
		checkOK(t, "prefill", pres, 2)
		checkOK(t, "decode", dres, 1) // round robin: the decode's second request
		if got := p.Stats().KVTransferHTTP > 0; got != crossProcess {
			t.Errorf("got KVTransferHTTP %d with crossProcess %v", p.Stats().KVTransferHTTP, crossProcess)
		}
	}
}

func TestRoutedDPRankOutOfRange(t *testing.T) {
	t.Parallel()
	const gen4 = `{"error":{"message":"routed_dp_rank=4 out of range [0, 4)"}}`
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{DPSize: 4})
	startServer(t, n, "agg1:30000", Config{})
	startServer(t, n, decodeAddr, Config{Role: RoleDecode, DPSize: 4})
	cases := []struct {
		name, addr, path, body string
		status                 int
		want                   string
	}{
		{"generate", "agg:30000", "/generate", `{"text":"a","routed_dp_rank":4}`, 400, gen4},
		{"decode before room check", decodeAddr, "/generate", `{"text":"a","routed_dp_rank":4}`, 400, gen4},
		{"negative", "agg:30000", "/generate", `{"text":"a","routed_dp_rank":-1}`, 400,
			`{"error":{"message":"routed_dp_rank=-1 out of range [0, 4)"}}`},
		{"alias", "agg:30000", "/generate", `{"text":"a","data_parallel_rank":9}`, 400,
			`{"error":{"message":"routed_dp_rank=9 out of range [0, 4)"}}`},
		{"batch item", "agg:30000", "/generate", `{"text":["a","b"],"routed_dp_rank":[0,5]}`, 400,
			`{"error":{"message":"routed_dp_rank=5 out of range [0, 4)"}}`},
		{"chat", "agg:30000", "/v1/chat/completions", `{"messages":[],"routed_dp_rank":4}`, 400,
			`{"object":"error","message":"routed_dp_rank=4 out of range [0, 4)","type":"BadRequestError","param":null,"code":400}`},
		{"generate stream", "agg:30000", "/generate", `{"text":"a","routed_dp_rank":4,"stream":true}`, 200,
			"data: " + gen4 + "\n\ndata: [DONE]\n\n"},
		{"chat stream", "agg:30000", "/v1/chat/completions", `{"messages":[],"routed_dp_rank":4,"stream":true}`, 200,
			`data: {"error":{"object":"error","message":"routed_dp_rank=4 out of range [0, 4)","type":"BadRequestError",` +
				`"param":null,"code":400}}` + "\n\ndata: [DONE]\n\n"},
		{"no DP", "agg1:30000", "/generate", `{"text":"a","routed_dp_rank":1}`, 400,
			`{"error":{"message":"routed_dp_rank=1 out of range [0, 1)"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if res := do(t, n, "POST", c.addr, c.path, c.body); res.status != c.status || res.body != c.want {
				t.Errorf("got %d %q; want %d %q", res.status, res.body, c.status, c.want)
			}
		})
	}
	// Without DP, SGLang ignores routed_dp_rank 0.
	if res := do(t, n, "POST", "agg1:30000", "/generate", `{"text":"a","routed_dp_rank":0}`); res.status != 200 {
		t.Errorf("got %d %s without DP; want 200", res.status, res.body)
	}
}

// TestPrefillDPRankOutOfRange checks that the decode takes
// disagg_prefill_dp_rank unchecked and fails late, when the prefill's
// bootstrap server does not know the rank.
func TestPrefillDPRankOutOfRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		old       bool
		rank      string
		wantRoute uint64 // bootstrap /route requests: info, then the rank
	}{
		{"beyond", false, "7", 2},
		{"negative", false, "-1", 2},
		{"old API", true, "4", 3}, // the new info query is refused first
	} {
		t.Run(c.name, func(t *testing.T) {
			n, p, d := newPD(t, Config{DPSize: 4, OldBootstrapAPI: c.old}, Config{DPSize: 4})
			res := do(t, n, "POST", decodeAddr, "/generate",
				miniLB(`{"text":"hi","rid":"r1","routed_dp_rank":3,"disagg_prefill_dp_rank":`+c.rank+`}`, 3))
			want := `{"object":"error","message":"Decode handshake failed for request rank=3 decode_req.req.rid='r1' ` +
				`decode_req.req.bootstrap_room=3 with exception KVTransferError(bootstrap_room=3): Could not fetch bootstrap ` +
				`info for: prefill_dp_rank: ` + c.rank + ` prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0",` +
				`"type":"500","param":null,"code":500}`
			if res.status != 500 || res.body != want {
				t.Errorf("got %d %q; want 500 %q", res.status, res.body, want)
			}
			if got := p.Stats().BootstrapRoute; got != c.wantRoute {
				t.Errorf("got BootstrapRoute %d; want %d", got, c.wantRoute)
			}
			checkKV(t, d, 0, 1)
		})
	}
}

// TestDPDispatch checks where items go without routed_dp_rank: a prefill
// follows the room, a decode takes turns, each decode rank fetching the
// prefill's info into its own table once.
func TestDPDispatch(t *testing.T) {
	t.Parallel()
	n, p, d := newPD(t, Config{DPSize: 4}, Config{DPSize: 4})
	for i := range 8 {
		room := uint64(10 + i)
		body := miniLB(`{"text":"hi"}`, room)
		pres, dres := both(t, n, "/generate", body, body)
		checkOK(t, "prefill", pres, int(room%4))
		checkOK(t, "decode", dres, i%4)
	}
	for _, s := range []*Server{p, d} {
		if got, want := fmtUints(s.Stats().RankRequests), "[2 2 2 2]"; got != want {
			t.Errorf("got %s RankRequests %s; want %s", s.cfg.Role, got, want)
		}
	}
	if got := d.Stats().PrefillInfoFetches; got != 4 {
		t.Errorf("got PrefillInfoFetches %d; want 4, one per decode DP rank", got)
	}
}

// TestDPBatchRanks checks per-item routed_dp_rank in a batch, round robin
// for the items without one, and that Stats returns a copy.
func TestDPBatchRanks(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	a := startServer(t, n, "agg:30000", Config{DPSize: 3, Tokens: 1})
	res := do(t, n, "POST", "agg:30000", "/generate", `{"text":["a","b","c"],"routed_dp_rank":[2,null,0]}`)
	var got []string
	for _, it := range parseJSON(t, res.body).GetArray() {
		got = append(got, str(it, "meta_info", "dp_rank"))
	}
	if strings.Join(got, ",") != "2,0,0" {
		t.Errorf("got item dp_ranks %s; want 2,0,0: %s", strings.Join(got, ","), res.body)
	}
	st := a.Stats()
	if s := fmtUints(st.RankRequests); s != "[2 0 1]" {
		t.Errorf("got RankRequests %s; want [2 0 1]", s)
	}
	st.RankRequests[0] = 99
	if s := fmtUints(a.Stats().RankRequests); s != "[2 0 1]" {
		t.Errorf("got RankRequests %s after changing a snapshot; want [2 0 1]", s)
	}
}

// fmtUints formats counters as fmt's %v does.
func fmtUints(us []uint64) string {
	s := make([]string, len(us))
	for i, u := range us {
		s[i] = strconv.FormatUint(u, 10)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestRanksRegisterOneByOne checks that the workers count of the bootstrap
// server's 503 grows over RegisterDelay.
func TestRanksRegisterOneByOne(t *testing.T) {
	t.Parallel()
	clk := newClock()
	n := NewNetwork()
	startServer(t, n, prefillAddr, clk.config(Config{Role: RolePrefill, DPSize: 4, RegisterDelay: 4 * time.Minute}))
	for _, c := range []struct {
		advance time.Duration
		status  int
		body    string
	}{
		{0, 503, "Prefill server not fully registered yet (0 workers registered)."},
		{time.Minute, 503, "Prefill server not fully registered yet (1 workers registered)."},
		{90 * time.Second, 503, "Prefill server not fully registered yet (2 workers registered)."},
		{89 * time.Second, 503, "Prefill server not fully registered yet (3 workers registered)."},
		{time.Second, 200, `{"rank_ip":"prefill","rank_port":9001}`},
	} {
		clk.advance(c.advance)
		if res := do(t, n, "GET", "prefill:8998", infoQuery("2", "0", "0", "0"), ""); res.status != c.status || res.body != c.body {
			t.Errorf("after %v more: got %d %q; want %d %q", c.advance, res.status, res.body, c.status, c.body)
		}
	}
}

// TestDPRankHeader checks that the OpenAI routes take X-Data-Parallel-Rank
// as routed_dp_rank, over the body's, and refuse one that is not an
// integer; /generate ignores it.
func TestDPRankHeader(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", Config{DPSize: 4})
	post := func(path, body, rank string) result {
		t.Helper()
		conn, err := n.Dial("agg:30000")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(testDeadline))
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://agg:30000" + path)
		req.Header.Set(HeaderDPRank, rank)
		req.SetBodyString(body)
		bw := bufio.NewWriter(conn)
		if err := req.Write(bw); err != nil || bw.Flush() != nil {
			t.Fatalf("cannot send: %v", err)
		}
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("cannot read: %v", err)
		}
		return result{resp.StatusCode(), string(resp.Header.ContentType()), string(resp.Body())}
	}
	if res := post("/v1/chat/completions", `{"messages":[],"routed_dp_rank":1}`, "3"); res.status != 200 {
		t.Fatalf("got %d %s", res.status, res.body)
	}
	if got, want := fmtUints(s.Stats().RankRequests), "[0 0 0 1]"; got != want {
		t.Errorf("got RankRequests %s; want %s: the header's rank over the body's", got, want)
	}
	for _, c := range []struct {
		name, path, rank string
		status           int
		want             string
	}{
		{"not an integer", "/v1/completions", "two", 400, `{"object":"error","message":"Invalid X-Data-Parallel-Rank header: must be an integer, got 'two'","type":"BadRequestError","param":null,"code":400}`},
		{"out of range", "/v1/chat/completions", "4", 400, `{"object":"error","message":"routed_dp_rank=4 out of range [0, 4)","type":"BadRequestError","param":null,"code":400}`},
	} {
		body := `{"prompt":"a"}`
		if c.path == "/v1/chat/completions" {
			body = `{"messages":[]}`
		}
		if res := post(c.path, body, c.rank); res.status != c.status || res.body != c.want {
			t.Errorf("%s: got %d %s; want %d %s", c.name, res.status, res.body, c.status, c.want)
		}
	}
	if res := post("/generate", `{"text":"a"}`, "two"); res.status != 200 {
		t.Errorf("/generate with the header got %d %s; want it ignored", res.status, res.body)
	}
}

// routed_dp_rank is read as pydantic reads an Optional[int]: "2", 2.0 and
// true are ranks 2, 2 and 1; the fake took them for no rank.
func TestRoutedRankAsPydanticReadsIt(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{DPSize: 4})
	for raw, rank := range map[string]int{`"2"`: 2, `" 3 "`: 3, `2.0`: 2, `"1.0"`: 1, `true`: 1, `false`: 0} {
		res := do(t, n, "POST", "agg:30000", "/generate", `{"text":"hi","routed_dp_rank":`+raw+`}`)
		checkOK(t, raw, res, rank)
	}
}
