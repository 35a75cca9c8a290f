package fake

import (
	"strings"
	"testing"
)

// TestNoRoom checks SGLang's refusal of a PD request without a room, on
// each route, exactly.
func TestNoRoom(t *testing.T) {
	const msg = "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"
	openAI := `{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":400}`
	abort := `{"type":"abort","message":"` + msg + `","status_code":400,"err_type":null}`
	cases := []struct {
		name, path, body string
		status           int
		want             string // the body, or the stream's events joined by "\n"
	}{
		{"generate", "/generate", `{"text":"hi","rid":"r1"}`, 400, `{"error":{"message":"` + msg + `"}}`},
		{"generate null room", "/generate", `{"text":"hi","rid":"r1","bootstrap_host":"prefill","bootstrap_room":null}`, 400, `{"error":{"message":"` + msg + `"}}`},
		{"completions", "/v1/completions", `{"prompt":"hi","rid":"r1"}`, 400, openAI},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"rid":"r1"}`, 400, openAI},
		{"generate stream", "/generate", `{"text":"hi","rid":"r1","stream":true}`, 200, abort + "\n[DONE]"},
		{"chat stream", "/v1/chat/completions", `{"messages":[],"rid":"r1","stream":true}`, 200, `{"error":` + openAI + "}\n[DONE]"},
	}
	for _, role := range []Role{RolePrefill, RoleDecode} {
		n := NewNetwork()
		s := startServer(t, n, "worker:30000", Config{Role: role})
		for _, c := range cases {
			t.Run(string(role)+"/"+c.name, func(t *testing.T) {
				if strings.Contains(c.body, `"stream":true`) {
					checkNoRoomStream(t, n, c.path, c.body, c.want)
					return
				}
				res := do(t, n, "POST", "worker:30000", c.path, c.body)
				if res.status != c.status || res.body != c.want {
					t.Errorf("got %d %s; want %d %s", res.status, res.body, c.status, c.want)
				}
			})
		}
		if got, want := s.Stats().RejectedNoRoom, uint64(len(cases)); got != want {
			t.Errorf("got %s RejectedNoRoom %d; want %d", role, got, want)
		}
	}
}

func checkNoRoomStream(t *testing.T, n *Network, path, body, want string) {
	t.Helper()
	ct, evs, err := stream(n, "worker:30000", path, body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("got content type %q; want text/event-stream", ct)
	}
	if len(evs) == 2 && strings.HasPrefix(evs[0], `{"text":""`) {
		evs[0] = str(parseJSON(t, evs[0]), "meta_info", "finish_reason")
	}
	if got := strings.Join(evs, "\n"); got != want {
		t.Errorf("got events\n%s\nwant\n%s", got, want)
	}
}

func TestAggregatedNeedsNoRoom(t *testing.T) {
	n := NewNetwork()
	s := startServer(t, n, "agg:30000", Config{Tokens: 2})
	for _, rt := range routeFields {
		res := do(t, n, "POST", "agg:30000", rt.path, "{"+rt.fields+"}")
		if got := decodeText(t, rt.path, res.body); res.status != 200 || got != " tok0 tok1 tok2" {
			t.Errorf("got %s %d %q; want 200 %q", rt.path, res.status, got, " tok0 tok1 tok2")
		}
	}
	res := do(t, n, "POST", "agg:30000", "/generate", `{"text":"hi"}`)
	if got := decodeText(t, "/generate", res.body); got != " tok0 tok1" {
		t.Errorf("got %q with Config.Tokens 2; want %q", got, " tok0 tok1")
	}
	if st := s.Stats(); st.RejectedNoRoom != 0 || st.GenerateRequests != 4 {
		t.Errorf("got RejectedNoRoom %d, GenerateRequests %d; want 0, 4", st.RejectedNoRoom, st.GenerateRequests)
	}
}

func TestBadBootstrapFields(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, decodeAddr, Config{Role: RoleDecode})
	a := startServer(t, n, "agg:30000", Config{})
	for _, c := range []struct{ body, want string }{
		{`{"text":"a","bootstrap_room":-1}`, `{"error":{"message":"bootstrap_room must be a non-negative integer"}}`},
		{`{"text":"a","bootstrap_room":1.5}`, `{"error":{"message":"bootstrap_room must be a non-negative integer"}}`},
		{`{"text":"a","bootstrap_room":1,"bootstrap_port":"x"}`, `{"error":{"message":"bootstrap_port must be an integer port or null"}}`},
	} {
		if res := do(t, n, "POST", decodeAddr, "/generate", c.body); res.status != 400 || res.body != c.want {
			t.Errorf("%s: got %d %s; want 400 %s", c.body, res.status, res.body, c.want)
		}
		// A server without disaggregation ignores the fields.
		if res := do(t, n, "POST", "agg:30000", "/generate", c.body); res.status != 200 {
			t.Errorf("%s on the aggregated server: got %d %s; want 200", c.body, res.status, res.body)
		}
	}
	if got := a.Stats().GenerateRequests; got != 3 {
		t.Errorf("got aggregated GenerateRequests %d; want 3", got)
	}
}

// SGLang reads bodies with Python's json.loads, which takes UTF-8 bytes
// behind a byte-order mark: so does the fake.
func TestBodyWithAByteOrderMark(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	for _, path := range []string{"/generate", "/v1/chat/completions"} {
		body := "\xef\xbb\xbf" + `{"text": "a", "messages": [{"role": "user", "content": "a"}]}`
		if res := do(t, n, "POST", "agg:30000", path, body); res.status != 200 {
			t.Fatalf("%s: got %d %s; want 200", path, res.status, res.body)
		}
	}
}

func TestBadRequests(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	for _, c := range []struct{ name, path, body, want string }{
		{"generate bad JSON", "/generate", `{bad`, `{"error":{"message":"JSON decode error: `},
		{"generate not an object", "/generate", `[1]`,
			`{"error":{"message":"Input should be a valid dictionary or object to extract fields from"}}`},
		{"generate no prompt", "/generate", `{}`,
			`{"error":{"message":"Either text, input_ids or input_embeds should be provided."}}`},
		{"chat bad JSON", "/v1/chat/completions", `nope`, `{"object":"error","message":"JSON decode error: `},
		{"completions not an object", "/v1/completions", `"x"`, `{"object":"error","message":"Input should be a valid ` +
			`dictionary or object to extract fields from","type":"BadRequestError","param":null,"code":400}`},
		{"chat no messages", "/v1/chat/completions", `{"model":"m"}`,
			`{"object":"error","message":"messages: Field required","type":"BadRequestError","param":null,"code":400}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := do(t, n, "POST", "agg:30000", c.path, c.body)
			if res.status != 400 || !strings.HasPrefix(res.body, c.want) {
				t.Errorf("got %d %s; want 400 %s", res.status, res.body, c.want)
			}
			if strings.Contains(c.name, "JSON") && parseJSON(t, res.body) == nil {
				t.Errorf("got a non-JSON error body %s", res.body)
			}
		})
	}
}

func TestPyRepr(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := pyRepr(in); got != want {
			t.Errorf("got pyRepr(%q) = %s; want %s", in, got, want)
		}
	}
	f("abc", `'abc'`)
	f("it's", `"it's"`)
	f(`it's "x"`, `'it\'s "x"'`)
	f("a\\b\n", `'a\\b\n'`)
	f("\x01é", `'\x01é'`)
}

func TestAppendString(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("got %s; want %s", got, want)
		}
		parseJSON(t, string(appendString(nil, in)))
	}
	f("plain", `"plain"`)
	f(`q"b\`, `"q\"b\\"`)
	f("\n\t\x00é", `"\n\t\u0000é"`)
}
