package lb

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// A body that is not a JSON object is told so, with what it is and the
// Content-Type it came with: curl -d 'text=hi' (a form) got "request body
// is not valid JSON: expected true at offset 0" (issue 20).
func TestBodyThatIsNotAnObjectNamesItsContentType(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, d := h.pair(fake.Config{}, fake.Config{})
		h.start(defaultConfig())
		const notJSON = "request body must be a JSON object, got a body that is not JSON"
		longType := "text/" + strings.Repeat("x", 300)
		for _, tc := range []struct {
			name, route, contentType, body string
			want                           string
		}{
			{"form", "/generate", "application/x-www-form-urlencoded", "text=hi",
				notJSON + ` (sent as Content-Type "application/x-www-form-urlencoded")`},
			{"plain text", "/v1/completions", "text/plain; charset=utf-8", "hello world",
				notJSON + ` (sent as Content-Type "text/plain; charset=utf-8")`},
			{"no content type", "/generate", "", "text=hi", notJSON + " (sent without a Content-Type)"},
			{"empty", "/generate", "application/json", "",
				`request body must be a JSON object, got an empty body (sent as Content-Type "application/json")`},
			{"array", "/v1/chat/completions", "application/json", `[{"role": "user", "content": "hi"}]`,
				`request body must be a JSON object, got a JSON array (sent as Content-Type "application/json")`},
			{"string", "/generate", "application/json", `"hi"`,
				`request body must be a JSON object, got a JSON string (sent as Content-Type "application/json")`},
			{"long content type", "/generate", longType, "text=hi",
				notJSON + " (sent as Content-Type " + strconv.Quote(longType[:maxEchoedContentType]) + "...)"},
			// An object cut short is JSON gone wrong: where it went wrong helps,
			// its Content-Type does not.
			{"broken object", "/generate", "application/json", `{"text": "a"`,
				"request body is not valid JSON: unexpected end of body"},
		} {
			req := "POST " + tc.route + " HTTP/1.1\r\nHost: pdlb\r\nContent-Length: " + strconv.Itoa(len(tc.body)) + "\r\n"
			if tc.contentType != "" {
				req += "Content-Type: " + tc.contentType + "\r\n"
			}
			status, body := h.sendRaw(req + "\r\n" + tc.body)
			if got := gjson.GetBytes(body, "error.message").String(); status != fasthttp.StatusBadRequest || got != tc.want {
				t.Errorf("%s: got %d %s; want 400 with message %q", tc.name, status, body, tc.want)
			}
			if typ := gjson.GetBytes(body, "error.type").String(); typ != "invalid_request_error" {
				t.Errorf("%s: got error type %q; want invalid_request_error", tc.name, typ)
			}
		}
		if n := p.Stats().GenerateRequests + d.Stats().GenerateRequests; n != 0 {
			t.Fatalf("%d bad bodies reached the workers", n)
		}
	})
}
