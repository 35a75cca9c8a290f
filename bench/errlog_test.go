package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

func TestAppendAnswerMessage(t *testing.T) {
	var p fastjson.Parser
	f := func(body, want string) {
		t.Helper()
		got := string(appendAnswerMessage([]byte("x|"), &p, []byte(body)))
		if got != "x|"+want {
			t.Fatalf("%s: got %q; want %q", body, got, "x|"+want)
		}
	}
	f(`{"error":{"message":"no decode","type":"BadGateway","code":502}}`, "no decode")
	f(`{"error":"boom"}`, "boom")
	f(`{"error":{"type":"x"}}`, `{"type":"x"}`)
	f(`{"detail":"Not Found"}`, "Not Found")
	f(`{"detail":[{"loc":["body","text"],"msg":"field required"}]}`, `[{"loc":["body","text"],"msg":"field required"}]`)
	f(`{"object":"error","message":"The model x does not exist.","code":404}`, "The model x does not exist.")
	f(`{"error":null,"detail":"x"}`, "x")
	f(`{"text":"","meta_info":{"finish_reason":{"type":"abort","message":"Invalid request: Disaggregated request received without bootstrap room id.","status_code":400}}}`,
		"Invalid request: Disaggregated request received without bootstrap room id.")
	f(`[{"text":"a"},{"meta_info":{"finish_reason":{"type":"abort","message":"second item"}}}]`, "second item")
	f(`{"x":1}`, `{"x":1}`)
	f(`[1, 2]`, `[1, 2]`)
	f(`Internal Server Error`, "not JSON: Internal Server Error")
	f("<html>\n<body>\n  Bad \t Gateway</body></html>\n", "not JSON: <html> <body> Bad Gateway</body></html>")
	f(``, ``)
	f(`{"detail":"two\nlines"}`, "two lines")
}

// A long message is cut to maxMessageLen bytes, at a character's boundary.
func TestAppendOneLineCuts(t *testing.T) {
	for _, s := range []string{strings.Repeat("é", 300), strings.Repeat("a ", 1000), strings.Repeat(" ", 900) + "end"} {
		got := appendOneLine(nil, []byte(s))
		if len(got) > maxMessageLen || !utf8.Valid(got) {
			t.Fatalf("got %d bytes %q; want at most %d, valid UTF-8", len(got), got, maxMessageLen)
		}
		if len(strings.TrimSpace(s)) > maxMessageLen && !bytes.HasSuffix(got, []byte("...")) {
			t.Fatalf("got %q; want a cut message to end in ...", got)
		}
	}
	if got := appendOneLine(nil, []byte(strings.Repeat(" ", 900)+"end")); string(got) != "" {
		t.Fatalf("got %q; want nothing from the first 800 bytes, all blank", got)
	}
}

// A connection's error leaves its local port out: each failure would be a
// message of its own.
func TestAppendErrorMessage(t *testing.T) {
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 54321}
	dst := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000}
	err := fmt.Errorf("wrapped: %w", &net.OpError{Op: "read", Net: "tcp", Source: src, Addr: dst, Err: syscall.ECONNRESET})
	got := string(appendErrorMessage(nil, err))
	if want := "wrapped: read tcp 127.0.0.1:8000: " + syscall.ECONNRESET.Error(); got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
	if got := string(appendErrorMessage(nil, &dialError{errors.New("connection refused")})); got != "cannot connect: connection refused" {
		t.Fatalf("got %q; want the error as it is", got)
	}
}

// TestRunErrorMessages fails requests with eight messages: the report
// keeps the first five, in order, with their counts, and says how many
// failures it leaves out, in text and JSON; it kept a count by kind alone
// (issue 20).
func TestRunErrorMessages(t *testing.T) {
	rc := &recorder{}
	cfg := serve(t, func(ctx *fasthttp.RequestCtx) {
		n := rc.add(ctx)
		ctx.SetContentType("application/json")
		switch {
		case n%3 == 0:
			ctx.SetBodyString(`{"text":" a","meta_info":{"completion_tokens":1}}`)
		case n <= 6:
			// 1, 2, 4, 5: the same two messages, twice each.
			ctx.SetStatusCode(fasthttp.StatusNotFound + n%2)
			ctx.SetBodyString(`{"detail":"Not Found"}`)
		default:
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			ctx.SetBodyString(`{"error":{"message":"failure ` + strconv.Itoa(n) + `"}}`)
		}
	})
	cfg.Requests = 18 // 12 failures: 4 with the first two messages, 8 with one each
	rep := run(t, cfg)
	want := []ErrorMessage{
		{Kind: "status_405", Message: "Not Found", Count: 2},
		{Kind: "status_404", Message: "Not Found", Count: 2},
		{Kind: "status_500", Message: "failure 7", Count: 1},
		{Kind: "status_500", Message: "failure 8", Count: 1},
		{Kind: "status_500", Message: "failure 10", Count: 1},
	}
	if !slices.Equal(rep.ErrorMessages, want) {
		t.Fatalf("got error messages %+v; want %+v", rep.ErrorMessages, want)
	}

	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"messages     status_405 2 times: Not Found\n",
		"             status_404 2 times: Not Found\n",
		"             status_500 1 time: failure 10\n",
		"             and 5 failures with other messages\n",
	} {
		if !strings.Contains(text.String(), line) {
			t.Fatalf("got\n%s\nwant a line %q", text.String(), line)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []ErrorMessage `json:"error_messages"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || !slices.Equal(got.Messages, want) {
		t.Fatalf("got JSON error_messages %+v (%v); want %+v", got.Messages, err, want)
	}
}

// A comparison cut short goes back to its last complete round: the error
// messages too, so that their counts stay those of Errors.
func TestRollbackErrorMessages(t *testing.T) {
	r := &runner{}
	r.errLog.add("status_404", []byte("Not Found"))
	m := r.mark()
	r.errLog.add("status_404", []byte("Not Found"))
	r.errLog.add("status_500", []byte("boom"))
	r.rollback(m)
	if got, want := r.errLog.snapshot(), []ErrorMessage{{Kind: "status_404", Message: "Not Found", Count: 1}}; !slices.Equal(got, want) {
		t.Fatalf("got %+v after the rollback; want %+v", got, want)
	}
}
