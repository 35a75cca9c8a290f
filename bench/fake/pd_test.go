package fake

import (
	"strings"
	"testing"
	"time"
)

// Request fields per route, asking for 3 tokens, without bootstrap fields.
var routeFields = []struct {
	name, path, fields string
}{
	{"generate", "/generate", `"text":"hello world","sampling_params":{"max_new_tokens":3},"rid":"r1"`},
	{"completions", "/v1/completions", `"model":"m","prompt":"hello world","max_tokens":3,"rid":"r1"`},
	{"chat", "/v1/chat/completions", `"model":"m","messages":[{"role":"user","content":"hello world"}],"max_tokens":3,"rid":"r1"`},
}

// decodeText is the generated text of a non-stream answer.
func decodeText(t *testing.T, path, body string) string {
	t.Helper()
	v := parseJSON(t, body)
	switch path {
	case "/generate":
		return string(v.GetStringBytes("text"))
	case "/v1/completions":
		return string(v.GetStringBytes("choices", "0", "text"))
	}
	return string(v.GetStringBytes("choices", "0", "message", "content"))
}

func TestPDNonStream(t *testing.T) {
	for _, rt := range routeFields {
		for _, port := range []string{"8998", "null"} {
			t.Run(rt.name+"/port="+port, func(t *testing.T) {
				n, p, d := newPD(t, Config{}, Config{})
				body := pdBody(rt.fields, "prefill", port, 42)
				pres, dres := both(t, n, rt.path, body, body)
				if pres.status != 200 || dres.status != 200 {
					t.Fatalf("got status %d, %d; want 200, 200: %s %s", pres.status, dres.status, pres.body, dres.body)
				}
				if got, want := decodeText(t, rt.path, dres.body), " tok0 tok1 tok2"; got != want {
					t.Errorf("got decode text %q; want %q", got, want)
				}
				if got := decodeText(t, rt.path, pres.body); got != "" {
					t.Errorf("got prefill text %q; want %q", got, "")
				}
				checkKV(t, p, 1, 0)
				checkKV(t, d, 1, 0)
			})
		}
	}
}

func TestPDGenerateAnswerShape(t *testing.T) {
	n, _, _ := newPD(t, Config{}, Config{})
	body := pdBody(`"input_ids":[5,6,7],"sampling_params":{"max_new_tokens":2},"rid":"r1"`, "prefill", "8998", 42)
	pres, dres := both(t, n, "/generate", body, body)
	d := parseJSON(t, dres.body)
	for _, c := range []struct{ key, want string }{
		{"text", `" tok0 tok1"`},
		{"output_ids", "[0,1]"},
	} {
		if got := str(d, c.key); got != c.want {
			t.Errorf("got decode %s %s; want %s", c.key, got, c.want)
		}
	}
	for _, c := range []struct{ key, want string }{
		{"id", `"r1"`},
		{"finish_reason", `{"type":"length","length":2}`},
		{"prompt_tokens", "3"},
		{"completion_tokens", "2"},
		{"cached_tokens", "0"},
		{"dp_rank", "0"},
	} {
		if got := str(d, "meta_info", c.key); got != c.want {
			t.Errorf("got decode meta_info.%s %s; want %s", c.key, got, c.want)
		}
	}
	if d.Get("meta_info", "e2e_latency") == nil {
		t.Errorf("got no meta_info.e2e_latency in %s", dres.body)
	}
	if got, want := str(parseJSON(t, pres.body), "meta_info", "finish_reason"), `{"type":"length","length":0}`; got != want {
		t.Errorf("got prefill finish_reason %s; want %s", got, want)
	}
}

func TestPDLogprobs(t *testing.T) {
	n, _, _ := newPD(t, Config{}, Config{})
	body := pdBody(`"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":2},"return_logprob":true`, "prefill", "8998", 42)
	pres, dres := both(t, n, "/generate", body, body)
	p, d := parseJSON(t, pres.body), parseJSON(t, dres.body)
	for _, c := range []struct{ name, got, want string }{
		{"prefill input", str(p, "meta_info", "input_token_logprobs"), "[[null,5,null],[-0.2,6,null],[-0.3,7,null],[-0.4,8,null]]"},
		{"decode input", str(d, "meta_info", "input_token_logprobs"), "[[-0.4,8,null]]"},
		{"decode output", str(d, "meta_info", "output_token_logprobs"), "[[-0.1,0,null],[-0.2,1,null]]"},
	} {
		if c.got != c.want {
			t.Errorf("got %s logprobs %s; want %s", c.name, c.got, c.want)
		}
	}
}

func TestPDStream(t *testing.T) {
	want := map[string][]string{
		"/generate": {
			`{"text":" tok0","meta_info.finish_reason":null}`,
			`{"text":" tok0 tok1","meta_info.finish_reason":null}`,
			`{"text":" tok0 tok1 tok2","meta_info.finish_reason":{"type":"length","length":3}}`,
		},
		"/v1/completions": {`" tok0"`, `" tok1"`, `" tok2"`, `"" length`},
		"/v1/chat/completions": {
			`{"role":"assistant","content":""}`, `{"content":" tok0"}`, `{"content":" tok1"}`,
			`{"content":" tok2"}`, `{} length`,
		},
	}
	for _, rt := range routeFields {
		t.Run(rt.name, func(t *testing.T) {
			n, p, d := newPD(t, Config{}, Config{})
			body := pdBody(rt.fields+`,"stream":true`, "prefill", "8998", 42)
			pev, dev := streamBoth(t, n, rt.path, body, body)
			if len(pev) == 0 || pev[len(pev)-1] != "[DONE]" || dev[len(dev)-1] != "[DONE]" {
				t.Fatalf("got streams %q and %q; want both to end with [DONE]", pev, dev)
			}
			got := summarize(t, rt.path, dev[:len(dev)-1])
			if strings.Join(got, "\n") != strings.Join(want[rt.path], "\n") {
				t.Errorf("got decode events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want[rt.path], "\n"))
			}
			checkKV(t, p, 1, 0)
			checkKV(t, d, 1, 0)
		})
	}
}

// summarize reduces stream events to what TestPDStream compares.
func summarize(t *testing.T, path string, events []string) []string {
	t.Helper()
	var out []string
	for _, ev := range events {
		v := parseJSON(t, ev)
		switch path {
		case "/generate":
			out = append(out, `{"text":`+str(v, "text")+`,"meta_info.finish_reason":`+str(v, "meta_info", "finish_reason")+"}")
		case "/v1/completions":
			out = append(out, strings.TrimSuffix(str(v, "choices", "0", "text")+" "+string(v.GetStringBytes("choices", "0", "finish_reason")), " "))
		default:
			out = append(out, strings.TrimSuffix(str(v, "choices", "0", "delta")+" "+string(v.GetStringBytes("choices", "0", "finish_reason")), " "))
		}
	}
	return out
}

func TestPDMismatch(t *testing.T) {
	t.Parallel()
	const good = `"text":"hi","rid":"r1"`
	for _, c := range []struct {
		name, host, port string
		room             uint64
		decodeMsg        string
	}{
		{"room", "prefill", "8998", 43, "Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=43 " +
			"with exception KVTransferError(bootstrap_room=43): Request 43 timed out after "},
		{"port", "prefill", "9999", 42, "Decode handshake failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=42 " +
			"with exception KVTransferError(bootstrap_room=42): Could not fetch prefill parallel info from bootstrap_addr: prefill:9999"},
		{"host", "other", "8998", 42, "Decode handshake failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=42 " +
			"with exception KVTransferError(bootstrap_room=42): Could not fetch prefill parallel info from bootstrap_addr: other:8998"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{KVTimeout: 300 * time.Millisecond}
			n, p, d := newPD(t, cfg, cfg)
			pres, dres := both(t, n, "/generate", pdBody(good, "prefill", "8998", 42), pdBody(good, c.host, c.port, c.room))
			checkServerError(t, "decode", dres, c.decodeMsg)
			checkServerError(t, "prefill", pres, "Prefill bootstrap failed for request rank=0 req.rid='r1' req.bootstrap_room=42 "+
				"with exception KVTransferError(bootstrap_room=42): Request 42 timed out after ")
			if msg := str(parseJSON(t, pres.body), "message"); !strings.HasSuffix(msg, `s in KVPoll.Bootstrapping"`) {
				t.Errorf("got prefill message %s; want it to end with %q", msg, "s in KVPoll.Bootstrapping")
			}
			checkKV(t, p, 0, 1)
			checkKV(t, d, 0, 1)
		})
	}
}

func TestPDMismatchStream(t *testing.T) {
	t.Parallel()
	cfg := Config{KVTimeout: 200 * time.Millisecond}
	n, _, _ := newPD(t, cfg, cfg)
	fields := `"text":"hi","rid":"r1","stream":true`
	_, dev := streamBoth(t, n, "/generate", pdBody(fields, "prefill", "8998", 1), pdBody(fields, "prefill", "8998", 2))
	if len(dev) != 2 || dev[1] != "[DONE]" {
		t.Fatalf("got decode events %q; want one chunk and [DONE]", dev)
	}
	fr := parseJSON(t, dev[0]).Get("meta_info", "finish_reason")
	if got := str(fr, "type") + " " + str(fr, "status_code") + " " + str(fr, "err_type"); got != `"abort" 500 null` {
		t.Errorf("got finish_reason type, status_code, err_type %s; want %s", got, `"abort" 500 null`)
	}
	if msg := string(fr.GetStringBytes("message")); !strings.HasPrefix(msg, "Decode transfer failed for request rank=0") {
		t.Errorf("got message %q; want a decode transfer failure", msg)
	}

	_, cev := streamBoth(t, n, "/v1/chat/completions",
		pdBody(`"messages":[],"stream":true`, "prefill", "8998", 3), pdBody(`"messages":[],"stream":true`, "prefill", "8998", 4))
	if len(cev) != 2 || !strings.HasPrefix(cev[0], `{"error":{"object":"error","message":"Decode transfer failed`) ||
		!strings.HasSuffix(cev[0], `"type":"500","param":null,"code":500}}`) || cev[1] != "[DONE]" {
		t.Errorf("got chat events %q; want an SSE error event and [DONE]", cev)
	}
}

// checkServerError checks an SGLang 500 whose message starts with prefix.
func checkServerError(t *testing.T, leg string, res result, prefix string) {
	t.Helper()
	if res.status != 500 {
		t.Fatalf("got %s status %d; want 500: %s", leg, res.status, res.body)
	}
	v := parseJSON(t, res.body)
	if got := str(v, "object") + str(v, "type") + str(v, "param") + str(v, "code"); got != `"error""500"null500` {
		t.Errorf("got %s error fields %s; want object error, type \"500\", param null, code 500", leg, got)
	}
	if msg := string(v.GetStringBytes("message")); !strings.HasPrefix(msg, prefix) {
		t.Errorf("got %s message %q; want it to start with %q", leg, msg, prefix)
	}
}

// checkKV checks a server's KV transfer counters and that no rendezvous
// entry is left.
func checkKV(t *testing.T, s *Server, ok, failed uint64) {
	t.Helper()
	st := s.Stats()
	if st.KVTransfersOK != ok || st.KVTransfersFailed != failed {
		t.Errorf("got %s KV transfers ok=%d failed=%d; want ok=%d failed=%d", s.cfg.Role, st.KVTransfersOK, st.KVTransfersFailed, ok, failed)
	}
	if n := s.kv.pending(); n != 0 {
		t.Errorf("got %d rendezvous entries left on the %s; want 0", n, s.cfg.Role)
	}
}

func TestBatchGenerate(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"lists", `{"text":["a","bbbbbbbb"],"sampling_params":{"max_new_tokens":2},` +
			`"bootstrap_host":["prefill","prefill"],"bootstrap_port":[8998,null],"bootstrap_room":[7,9]}`},
		{"scalar room", `{"input_ids":[[1],[1,2]],"sampling_params":[{"max_new_tokens":2},{"max_new_tokens":2}],` +
			`"bootstrap_host":"prefill","bootstrap_port":8998,"bootstrap_room":100}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, p, d := newPD(t, Config{}, Config{})
			pres, dres := both(t, n, "/generate", c.body, c.body)
			if pres.status != 200 || dres.status != 200 {
				t.Fatalf("got status %d, %d; want 200, 200: %s %s", pres.status, dres.status, pres.body, dres.body)
			}
			items := parseJSON(t, dres.body).GetArray()
			if len(items) != 2 {
				t.Fatalf("got %d decode items; want 2: %s", len(items), dres.body)
			}
			for i, it := range items {
				// No "index": SGLang adds it to a batch's stream chunks only.
				got := str(it, "text") + " " + str(it, "index") + " " + str(it, "meta_info", "prompt_tokens")
				if want := `" tok0 tok1"  ` + string(rune('1'+i)); got != want {
					t.Errorf("got item %d text, index, prompt_tokens %s; want %s", i, got, want)
				}
			}
			checkKV(t, p, 2, 0)
			checkKV(t, d, 2, 0)
		})
	}
}

func TestOpenAISamplesUseConsecutiveRooms(t *testing.T) {
	t.Parallel()
	cfg := Config{KVTimeout: 300 * time.Millisecond}
	n, p, d := newPD(t, cfg, cfg)
	body := pdBody(`"prompt":"hi","n":2,"max_tokens":1`, "prefill", "8998", 5)
	_, dres := both(t, n, "/v1/completions", body, body)
	v := parseJSON(t, dres.body)
	if got := str(v, "choices", "1", "index") + str(v, "usage"); got != `1{"prompt_tokens":1,"total_tokens":3,"completion_tokens":2,"prompt_tokens_details":null}` {
		t.Errorf("got second choice index and usage %s: %s", got, dres.body)
	}
	checkKV(t, p, 2, 0)
	checkKV(t, d, 2, 0)

	// A prefill leg without n serves room 5 only: the decode's room 6 fails.
	_, dres = both(t, n, "/v1/completions", pdBody(`"prompt":"hi","max_tokens":1`, "prefill", "8998", 5), body)
	checkServerError(t, "decode", dres, "Decode transfer failed for request rank=0 decode_req.req.rid=")
	if !strings.Contains(dres.body, "bootstrap_room=6") {
		t.Errorf("got %s; want the failure of room 6", dres.body)
	}
}

func TestDuplicateRoomFails(t *testing.T) {
	n, p, _ := newPD(t, Config{}, Config{})
	body := pdBody(`"text":"hi","sampling_params":{"max_new_tokens":1}`, "prefill", "8998", 8)
	answers := make(chan result, 2)
	for range 2 {
		go func() {
			res, err := roundTrip(n, "POST", decodeAddr, "/generate", body)
			if err != nil {
				res.body = err.Error()
			}
			answers <- res
		}()
	}
	// Neither decode can finish before the prefill leg comes, so the first
	// answer is the one that found the room taken.
	first := within(t, answers, "the duplicate's answer")
	checkServerError(t, "decode", first, "Decode transfer failed for request rank=0")
	if !strings.Contains(first.body, "bootstrap_room 8 is already used by another request in flight") {
		t.Errorf("got %s; want the duplicate room failure", first.body)
	}
	pres := do(t, n, "POST", prefillAddr, "/generate", body)
	if second := within(t, answers, "the other decode's answer"); pres.status != 200 || second.status != 200 {
		t.Errorf("got prefill %d and decode %d; want 200 and 200: %s", pres.status, second.status, second.body)
	}
	checkKV(t, p, 1, 0)
}
