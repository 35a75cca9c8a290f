package fake

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Addresses of the servers of the local prefill tests.
const (
	localAddr = "decode-agg:30010" // a decode with ConditionalAgg
	aggAddr   = "agg:30000"
)

// localBody asks for a local prefill with logprobs, without bootstrap
// fields.
const localBody = `"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":3},"rid":"r1","return_logprob":true,"do_local_prefill":true`

// latency matches meta_info.e2e_latency, and sent matches a stream event's
// sent_unix_nano: the fields two answers to the same request do not share.
var (
	latency = regexp.MustCompile(`"e2e_latency":[-+.0-9eE]+`)
	sent    = regexp.MustCompile(`"sent_unix_nano":[0-9]+`)
)

// sameAnswer strips e2e_latency and sent_unix_nano, so an answer can be
// compared with another.
func sameAnswer(s string) string {
	s = latency.ReplaceAllString(s, `"e2e_latency":0`)
	return sent.ReplaceAllString(s, `"sent_unix_nano":0`)
}

// newLocal starts a decode with ConditionalAgg on localAddr, alone (no
// prefill anywhere, so any KV transfer fails), and an aggregated server on
// aggAddr to compare its answers with.
func newLocal(t *testing.T) (*Network, *Server) {
	t.Helper()
	n := NewNetwork()
	d := startServer(t, n, localAddr, Config{Role: RoleDecode, ConditionalAgg: true, KVTimeout: 300 * time.Millisecond})
	startServer(t, n, aggAddr, Config{})
	return n, d
}

// checkLocal checks the decode prefilled local items itself and did no KV
// transfer.
func checkLocal(t *testing.T, d *Server, local uint64) {
	t.Helper()
	st := d.Stats()
	got := []uint64{st.LocalPrefills, st.KVTransfersOK, st.KVTransfersFailed, st.RejectedNoRoom, st.PrefillInfoFetches}
	want := []uint64{local, 0, 0, 0, 0}
	if !slices.Equal(got, want) {
		t.Errorf("got LocalPrefills, KVTransfersOK, KVTransfersFailed, RejectedNoRoom, PrefillInfoFetches %v; want %v", got, want)
	}
	checkKV(t, d, 0, 0)
}

func TestLocalPrefill(t *testing.T) {
	n, d := newLocal(t)
	res := do(t, n, "POST", localAddr, "/generate", "{"+localBody+"}")
	if res.status != 200 {
		t.Fatalf("got %d %s; want 200", res.status, res.body)
	}
	v := parseJSON(t, res.body)
	for _, c := range []struct{ name, got, want string }{
		{"text", str(v, "text"), `" tok0 tok1 tok2"`},
		{"finish_reason", str(v, "meta_info", "finish_reason"), `{"type":"length","length":3}`},
		{"input logprobs", str(v, "meta_info", "input_token_logprobs"), "[[null,5,null],[-0.2,6,null],[-0.3,7,null],[-0.4,8,null]]"},
		{"output logprobs", str(v, "meta_info", "output_token_logprobs"), "[[-0.1,0,null],[-0.2,1,null],[-0.3,2,null]]"},
	} {
		if c.got != c.want {
			t.Errorf("got %s %s; want %s", c.name, c.got, c.want)
		}
	}
	agg := do(t, n, "POST", aggAddr, "/generate", "{"+localBody+"}")
	if got, want := sameAnswer(res.body), sameAnswer(agg.body); got != want {
		t.Errorf("got %q; want the aggregated answer %q", got, want)
	}
	checkLocal(t, d, 1)
}

func TestLocalPrefillStream(t *testing.T) {
	n, d := newLocal(t)
	body := "{" + localBody + `,"stream":true}`
	_, evs, err := stream(n, localAddr, "/generate", body)
	if err != nil {
		t.Fatal(err)
	}
	_, want, err := stream(n, aggAddr, "/generate", body)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 || evs[3] != "[DONE]" {
		t.Fatalf("got events %q; want 3 chunks and [DONE]", evs)
	}
	if got := str(parseJSON(t, evs[2]), "meta_info", "input_token_logprobs"); got != "[[null,5,null],[-0.2,6,null],[-0.3,7,null],[-0.4,8,null]]" {
		t.Errorf("got last chunk's input logprobs %s; want the whole prompt's", got)
	}
	if got, want := sameAnswer(strings.Join(evs, "\n")), sameAnswer(strings.Join(want, "\n")); got != want {
		t.Errorf("got events\n%s\nwant the aggregated events\n%s", got, want)
	}
	checkLocal(t, d, 1)
}

// TestLocalPrefillIgnored checks the servers and routes that ignore
// do_local_prefill refuse a roomless request with the exact no-room 400.
func TestLocalPrefillIgnored(t *testing.T) {
	const msg = "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"
	generateErr := `{"error":{"message":"` + msg + `"}}`
	openAIErr := `{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":400}`
	for _, c := range []struct {
		name, path, body, want string
		cfg                    Config
	}{
		{"decode without the flag", "/generate", `{"text":"hi","rid":"r1","do_local_prefill":true}`, generateErr,
			Config{Role: RoleDecode}},
		{"completions", "/v1/completions", `{"prompt":"hi","rid":"r1","do_local_prefill":true}`, openAIErr,
			Config{Role: RoleDecode, ConditionalAgg: true}},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"rid":"r1","do_local_prefill":true}`, openAIErr,
			Config{Role: RoleDecode, ConditionalAgg: true}},
		{"prefill", "/generate", `{"text":"hi","rid":"r1","do_local_prefill":true}`, generateErr,
			Config{Role: RolePrefill, ConditionalAgg: true}},
		{"false", "/generate", `{"text":"hi","rid":"r1","do_local_prefill":false}`, generateErr,
			Config{Role: RoleDecode, ConditionalAgg: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := NewNetwork()
			s := startServer(t, n, "worker:30000", c.cfg)
			res := do(t, n, "POST", "worker:30000", c.path, c.body)
			if res.status != 400 || res.body != c.want {
				t.Errorf("got %d %q; want 400 %q", res.status, res.body, c.want)
			}
			if st := s.Stats(); st.RejectedNoRoom != 1 || st.LocalPrefills != 0 {
				t.Errorf("got RejectedNoRoom %d, LocalPrefills %d; want 1, 0", st.RejectedNoRoom, st.LocalPrefills)
			}
		})
	}
}

func TestLocalPrefillIgnoredStream(t *testing.T) {
	const msg = "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"
	n := NewNetwork()
	s := startServer(t, n, "worker:30000", Config{Role: RoleDecode})
	checkNoRoomStream(t, n, "/generate", `{"text":"hi","rid":"r1","stream":true,"do_local_prefill":true}`,
		`{"type":"abort","message":"`+msg+`","status_code":400,"err_type":null}`+"\n[DONE]")
	if got := s.Stats().RejectedNoRoom; got != 1 {
		t.Errorf("got RejectedNoRoom %d; want 1", got)
	}
}

func TestLocalPrefillAggregatedUnaffected(t *testing.T) {
	n := NewNetwork()
	a := startServer(t, n, aggAddr, Config{ConditionalAgg: true})
	plain := do(t, n, "POST", aggAddr, "/generate", `{"input_ids":[5,6],"rid":"r1","return_logprob":true}`)
	marked := do(t, n, "POST", aggAddr, "/generate", `{"input_ids":[5,6],"rid":"r1","return_logprob":true,"do_local_prefill":true}`)
	if marked.status != 200 || sameAnswer(marked.body) != sameAnswer(plain.body) {
		t.Errorf("got %d %q; want 200 %q", marked.status, marked.body, plain.body)
	}
	if got := a.Stats().LocalPrefills; got != 0 {
		t.Errorf("got LocalPrefills %d; want 0", got)
	}
}

// TestLocalPrefillWithRoom checks the marker wins over bootstrap fields, as
// in the draft: the decode neither fetches the prefill's info nor waits for
// its KV (there is no prefill, so either would fail).
func TestLocalPrefillWithRoom(t *testing.T) {
	n, d := newLocal(t)
	res := do(t, n, "POST", localAddr, "/generate", pdBody(localBody, "prefill", "8998", 42))
	if res.status != 200 || str(parseJSON(t, res.body), "text") != `" tok0 tok1 tok2"` {
		t.Errorf("got %d %s; want 200 with 3 tokens", res.status, res.body)
	}
	checkLocal(t, d, 1)
}

// TestLocalPrefillBatch checks do_local_prefill is read per prompt: a
// scalar marks the whole batch, a list each prompt, and a mixed batch
// prefills its marked prompt locally while the other waits for its KV.
func TestLocalPrefillBatch(t *testing.T) {
	t.Run("scalar", func(t *testing.T) {
		n, d := newLocal(t)
		res := do(t, n, "POST", localAddr, "/generate", `{"text":["a","b"],"sampling_params":{"n":2,"max_new_tokens":1},"do_local_prefill":true}`)
		if items := parseJSON(t, res.body).GetArray(); res.status != 200 || len(items) != 4 {
			t.Fatalf("got %d %s; want 200 with 4 items", res.status, res.body)
		}
		checkLocal(t, d, 4)
	})
	t.Run("roomless unmarked", func(t *testing.T) {
		n, d := newLocal(t)
		res := do(t, n, "POST", localAddr, "/generate", `{"text":["a","b"],"rid":["r0","r1"],"do_local_prefill":[true,false]}`)
		want := `{"error":{"message":"Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"}}`
		if res.status != 400 || res.body != want {
			t.Errorf("got %d %q; want 400 %q", res.status, res.body, want)
		}
		if st := d.Stats(); st.RejectedNoRoom != 1 || st.LocalPrefills != 0 {
			t.Errorf("got RejectedNoRoom %d, LocalPrefills %d; want 1, 0", st.RejectedNoRoom, st.LocalPrefills)
		}
	})
	t.Run("mixed", func(t *testing.T) {
		cfg := Config{KVTimeout: 300 * time.Millisecond} // a broken fake fails fast
		dcfg := cfg
		dcfg.ConditionalAgg = true
		n, p, d := newPD(t, cfg, dcfg)
		dbody := `{"text":["a","b"],"sampling_params":{"max_new_tokens":2},"do_local_prefill":[true,false],` +
			`"bootstrap_host":"prefill","bootstrap_port":8998,"bootstrap_room":[10,20]}`
		pbody := pdBody(`"text":"b","sampling_params":{"max_new_tokens":2}`, "prefill", "8998", 20)
		_, dres := bothTo(t, n, prefillAddr, "/generate", pbody, dbody)
		items := parseJSON(t, dres.body).GetArray()
		if dres.status != 200 || len(items) != 2 {
			t.Fatalf("got %d %s; want 200 with 2 items", dres.status, dres.body)
		}
		for i, it := range items {
			if got := str(it, "text"); got != `" tok0 tok1"` {
				t.Errorf("got item %d text %s; want %q", i, got, " tok0 tok1")
			}
		}
		if st := d.Stats(); st.LocalPrefills != 1 || st.KVTransfersOK != 1 {
			t.Errorf("got decode LocalPrefills %d, KVTransfersOK %d; want 1, 1", st.LocalPrefills, st.KVTransfersOK)
		}
		checkKV(t, p, 1, 0)
	})
}

// TestLocalPrefillDP checks a local item goes to its routed DP rank and
// resolves no prefill DP rank, so the first-request bug cannot fail it.
func TestLocalPrefillDP(t *testing.T) {
	n := NewNetwork()
	d := startServer(t, n, localAddr, Config{Role: RoleDecode, ConditionalAgg: true, DPSize: 2, FirstRequestBug: true})
	fields := `"text":"hi","do_local_prefill":true,"routed_dp_rank":1,"disagg_prefill_dp_rank":0`
	res := do(t, n, "POST", localAddr, "/generate", pdBody(fields, "prefill", "8998", 4))
	checkOK(t, "decode", res, 1)
	if st := d.Stats(); st.FirstRequestFailures != 0 || st.LocalPrefills != 1 || st.RankRequests[1] != 1 {
		t.Errorf("got FirstRequestFailures %d, LocalPrefills %d, RankRequests %v; want 0, 1, [0 1]",
			st.FirstRequestFailures, st.LocalPrefills, st.RankRequests)
	}
}

// TestLocalPrefillAborted checks a local prefill cut short is not counted:
// on a closed server every wait ends at once.
func TestLocalPrefillAborted(t *testing.T) {
	s := New(Config{Role: RoleDecode, ConditionalAgg: true, PrefillDelay: time.Hour})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := newCtx("POST", "/generate", `{"text":"hi","rid":"r1","do_local_prefill":true}`)
	s.Handler(ctx)
	fr := str(parseJSON(t, string(ctx.Response.Body())), "meta_info", "finish_reason")
	if want := `{"type":"abort","message":"Aborted by AbortReq.","status_code":null,"err_type":null}`; fr != want {
		t.Errorf("got finish_reason %s; want %s", fr, want)
	}
	if got := s.Stats().LocalPrefills; got != 0 {
		t.Errorf("got LocalPrefills %d; want 0", got)
	}
}

func TestLocalPrefillServerInfo(t *testing.T) {
	n, _ := newLocal(t)
	startServer(t, n, decodeAddr, Config{Role: RoleDecode})
	for _, c := range []struct{ addr, want string }{
		{localAddr, "true"},
		{decodeAddr, ""},
		{aggAddr, ""},
	} {
		v := parseJSON(t, do(t, n, "GET", c.addr, "/server_info", "").body)
		if got := str(v, "disaggregation_decode_enable_conditional_agg"); got != c.want {
			t.Errorf("got %s disaggregation_decode_enable_conditional_agg %q; want %q", c.addr, got, c.want)
		}
	}
}
