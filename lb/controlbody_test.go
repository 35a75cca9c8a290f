package lb

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// An /abort_request whose body is not a JSON object gets the 400 the
// generate routes give the same body, from any caller, and reaches no
// worker. It used to get a 403 calling it an abort_all for operators from
// a remote caller, and from loopback the workers' own 400s, as "2 of 2
// backends refused /abort_request".
func TestAbortRequestBodyMustBeAnObject(t *testing.T) {
	h, srv, p, d := operatorHarness(t, defaultConfig())
	bodies := []struct{ name, body, contentType string }{
		{"cut short", "{", "application/x-www-form-urlencoded"}, // curl -d '{'
		{"form", "rid=abcdefghijk", "application/x-www-form-urlencoded"},
		{"empty", "", "application/x-www-form-urlencoded"},
		{"array", `["abcdefghijk"]`, "application/json"},
	}
	for _, caller := range []struct {
		name string
		send func(method, path, body string, headers ...string) reply
	}{
		{"remote", h.do}, // in memory: no loopback address
		{"loopback", h.loopback(srv)},
	} {
		for _, b := range bodies {
			got := caller.send("POST", "/abort_request", b.body, "Content-Type", b.contentType)
			want := caller.send("POST", "/generate", b.body, "Content-Type", b.contentType)
			msg := gjson.GetBytes(got.body, "error.message").String()
			if want.status != fasthttp.StatusBadRequest {
				t.Fatalf("%s, %s: /generate got %d %s; want its 400", caller.name, b.name, want.status, want.body)
			}
			if got.status != fasthttp.StatusBadRequest || msg != gjson.GetBytes(want.body, "error.message").String() ||
				gjson.GetBytes(got.body, "error.type").String() != "invalid_request_error" {
				t.Errorf("%s, %s: got %d %s; want /generate's 400 %s", caller.name, b.name, got.status, got.body, want.body)
			}
			if b.name != "cut short" && !strings.Contains(msg, "must be a JSON object") {
				t.Errorf("%s, %s: got %q; want it to say the body must be a JSON object", caller.name, b.name, msg)
			}
		}
	}
	for _, w := range []*fake.Server{p, d} {
		if st := w.Stats(); st.AbortRequest != 0 || st.GenerateRequests != 0 {
			t.Errorf("a worker got %d aborts and %d generations; want none", st.AbortRequest, st.GenerateRequests)
		}
	}
	// Another method's body is not for this check: a GET gets the 403 it
	// got before (an operator's request), not a 400 for its empty body.
	if r := h.do("GET", "/abort_request", ""); r.status != fasthttp.StatusForbidden {
		t.Errorf("GET /abort_request: got %d %s; want 403", r.status, r.body)
	}
}

// A rid behind a UTF-8 byte-order mark names one request, as without it:
// the check took the mark, and the rules after it read the body as naming
// none, an abort_all, which a client got a 403 for.
func TestAbortByRIDBehindAByteOrderMark(t *testing.T) {
	h, _, p, d := operatorHarness(t, defaultConfig())
	r := h.do("POST", "/abort_request", "\xef\xbb\xbf"+`{"rid": "abcdefghijklmnop"}`, "Content-Type", "application/json")
	if r.status != fasthttp.StatusOK {
		t.Fatalf("got %d %s; want 200, an abort by rid", r.status, r.body)
	}
	for _, w := range []*fake.Server{p, d} {
		if st := w.Stats(); st.AbortRequest != 1 {
			t.Errorf("a worker got %d aborts; want 1", st.AbortRequest)
		}
	}
}
