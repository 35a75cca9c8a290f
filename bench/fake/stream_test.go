package fake

import (
	"strings"
	"testing"
	"time"
)

// TestStreamEventsArriveOneByOne holds each token at a gate, so the test
// reads an event while the fake cannot have produced the next one yet.
func TestStreamEventsArriveOneByOne(t *testing.T) {
	want := map[string][]string{
		"generate":    {`" tok0"`, `" tok0 tok1"`, `" tok0 tok1 tok2"`},
		"completions": {`" tok0"`, `" tok1"`, `" tok2"`},
		"chat":        {`" tok0"`, `" tok1"`, `" tok2"`},
	}
	for _, rt := range routeFields {
		t.Run(rt.name, func(t *testing.T) {
			gate := make(chan struct{})
			n := NewNetwork()
			startServer(t, n, "agg:30000", Config{TokenGate: gate})
			s, err := openSSE(n, "agg:30000", rt.path, "{"+rt.fields+`,"stream":true}`)
			if err != nil {
				t.Fatal(err)
			}
			defer s.conn.Close()
			if ct := string(s.header.ContentType()); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("got content type %q; want text/event-stream", ct)
			}
			if rt.name == "chat" {
				expectEvent(t, s, `"delta":{"role":"assistant","content":""}`)
			}
			for _, text := range want[rt.name] {
				release(t, gate)
				expectEvent(t, s, text)
			}
			rest, err := s.all()
			if err != nil {
				t.Fatal(err)
			}
			if len(rest) == 0 || rest[len(rest)-1] != "[DONE]" {
				t.Errorf("got closing events %q; want them to end with [DONE]", rest)
			}
		})
	}
}

// release lets the fake produce one more token.
func release(t *testing.T, gate chan<- struct{}) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		gate <- struct{}{}
	}()
	within(t, done, "the fake to take a token")
}

// expectEvent reads the next event and checks it contains want.
func expectEvent(t *testing.T, s *sse, want string) {
	t.Helper()
	ev, ok, err := s.next()
	if err != nil || !ok {
		t.Fatalf("got no event (%v); want one containing %s", err, want)
	}
	if !strings.Contains(ev, want) {
		t.Errorf("got event %s; want it to contain %s", ev, want)
	}
}

func TestStreamUsageAndSamples(t *testing.T) {
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{})
	_, evs, err := stream(n, "agg:30000", "/v1/chat/completions",
		`{"messages":[{"role":"user","content":"12345678"}],"n":2,"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	// Two role chunks, two token chunks, two finish chunks, usage, [DONE].
	if len(evs) != 8 {
		t.Fatalf("got %d events; want 8: %q", len(evs), evs)
	}
	if got, want := str(parseJSON(t, evs[6]), "usage"), `{"prompt_tokens":2,"total_tokens":4,"completion_tokens":2,"prompt_tokens_details":null}`; got != want {
		t.Errorf("got usage %s; want %s", got, want)
	}
	if got := str(parseJSON(t, evs[3]), "choices", "0", "index"); got != "1" {
		t.Errorf("got the second token chunk's choice index %s; want 1", got)
	}
}

// TestHandlerWithoutStart serves a stream through Handler alone, reading the
// body in memory.
func TestHandlerWithoutStart(t *testing.T) {
	s := New(Config{Tokens: 2})
	defer s.Close()
	ctx := newCtx("POST", "/generate", `{"text":"hi","stream":true,"rid":"x"}`)
	s.Handler(ctx)
	body := string(ctx.Response.Body())
	evs := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if len(evs) != 3 || evs[2] != "data: [DONE]" || !strings.Contains(evs[1], `"text":" tok0 tok1"`) {
		t.Errorf("got body %q; want two chunks and [DONE]", body)
	}
	if got := s.Stats().InFlight; got != 0 {
		t.Errorf("got InFlight %d after the stream; want 0", got)
	}
}

func TestStreamAbortedMidway(t *testing.T) {
	gate := make(chan struct{})
	n := NewNetwork()
	a := startServer(t, n, "agg:30000", Config{TokenGate: gate})
	s, err := openSSE(n, "agg:30000", "/generate", `{"text":"hi","rid":"s1","stream":true,"sampling_params":{"max_new_tokens":3}}`)
	if err != nil {
		t.Fatal(err)
	}
	defer s.conn.Close()
	release(t, gate)
	expectEvent(t, s, `"text":" tok0"`)
	if res := do(t, n, "POST", "agg:30000", "/abort_request", `{"rid":"s1"}`); res.status != 200 {
		t.Fatalf("got abort status %d; want 200", res.status)
	}
	rest, err := s.all()
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 || rest[1] != "[DONE]" {
		t.Fatalf("got %q; want an abort chunk and [DONE]", rest)
	}
	v := parseJSON(t, rest[0])
	want := `" tok0" {"type":"abort","message":"Aborted by AbortReq.","status_code":null,"err_type":null}`
	if got := str(v, "text") + " " + str(v, "meta_info", "finish_reason"); got != want {
		t.Errorf("got %s; want %s", got, want)
	}
	if st := a.Stats(); st.Aborts != 1 || st.InFlight != 0 {
		t.Errorf("got Aborts %d, InFlight %d; want 1, 0", st.Aborts, st.InFlight)
	}
}

// TestStreamSentStamp checks that every stream event but [DONE] carries its
// sending time, where each route puts it, and that non-stream answers do
// not: the bench's event lag is read from it.
func TestStreamSentStamp(t *testing.T) {
	for _, rt := range routeFields {
		t.Run(rt.name, func(t *testing.T) {
			n := NewNetwork()
			startServer(t, n, "agg:30000", Config{})
			before := time.Now().UnixNano()
			_, evs, err := stream(n, "agg:30000", rt.path, "{"+rt.fields+`,"stream":true}`)
			after := time.Now().UnixNano()
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs[:len(evs)-1] {
				v := parseJSON(t, ev)
				sent := v.Get("sent_unix_nano")
				if rt.name == "generate" {
					sent = v.Get("meta_info", "sent_unix_nano")
				}
				if sent == nil || sent.GetInt64() < before || sent.GetInt64() > after {
					t.Fatalf("got event %s; want a sent_unix_nano in [%d, %d]", ev, before, after)
				}
			}
			res := do(t, n, "POST", "agg:30000", rt.path, "{"+rt.fields+"}")
			if strings.Contains(res.body, "sent_unix_nano") {
				t.Fatalf("got non-stream answer %s; want no sent_unix_nano", res.body)
			}
		})
	}
}
