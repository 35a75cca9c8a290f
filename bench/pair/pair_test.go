package pair

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// listen serves h on a loopback port until the test ends.
func listen(t *testing.T, h fasthttp.RequestHandler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// startPair serves a pair proxy in front of prefill and decode until the
// test ends, and checks that Serve then returns.
func startPair(t *testing.T, prefill, decode string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, Config{Prefill: prefill, Decode: decode, BootstrapPort: 8998}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context was done")
		}
	})
	return ln.Addr().String()
}

func post(t *testing.T, addr, path, body string) (int, []byte) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + addr + path)
	req.SetBodyString(body)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// Both legs get the body with the same bootstrap fields; the client gets
// the decode's answer.
func TestPairSendsBothLegsAndAnswersWithTheDecode(t *testing.T) {
	t.Parallel()
	bodies := make(chan []byte, 2)
	record := func(answer string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			bodies <- append([]byte(nil), ctx.PostBody()...)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(answer)
		}
	}
	prefill := listen(t, record(`{"leg": "prefill"}`))
	decode := listen(t, record(`{"leg": "decode"}`))
	addr := startPair(t, prefill, decode)

	status, body := post(t, addr, "/generate", `{"text": "hi"}`)
	if status != fasthttp.StatusOK || string(body) != `{"leg": "decode"}` {
		t.Fatalf("got %d %s; want 200 and the decode's answer", status, body)
	}
	p, d := <-bodies, <-bodies
	if string(p) != string(d) {
		t.Fatalf("the legs got different bodies:\n%s\n%s", p, d)
	}
	got := gjson.ParseBytes(p)
	if got.Get("text").Str != "hi" || got.Get("bootstrap_host").Str != "127.0.0.1" ||
		got.Get("bootstrap_port").Int() != 8998 || !got.Get("bootstrap_room").Exists() {
		t.Fatalf("body %s lacks the client's fields or the bootstrap fields", p)
	}
	if _, err := strconv.ParseUint(got.Get("bootstrap_room").Raw, 10, 63); err != nil {
		t.Fatalf("bootstrap_room %s is not a room: %v", got.Get("bootstrap_room").Raw, err)
	}
}

// A body that is not a JSON object gets a JSON error, and no worker sees it;
// a decode that cannot be reached gets one too.
func TestPairErrors(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{}, 2)
	prefill := listen(t, func(*fasthttp.RequestCtx) { seen <- struct{}{} })
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	_ = down.Close()
	addr := startPair(t, prefill, downAddr)

	status, body := post(t, addr, "/generate", `[1, 2`)
	if status != fasthttp.StatusBadRequest || !gjson.GetBytes(body, "error.message").Exists() {
		t.Fatalf("bad body: got %d %s; want 400 with a JSON error", status, body)
	}
	select {
	case <-seen:
		t.Fatal("a worker got a request whose body was refused")
	default:
	}
	status, body = post(t, addr, "/generate", `{"text": "hi"}`)
	if status != fasthttp.StatusBadGateway || !gjson.GetBytes(body, "error.message").Exists() {
		t.Fatalf("decode down: got %d %s; want 502 with a JSON error", status, body)
	}
	if status, _ := post(t, addr, "/health", ""); status != fasthttp.StatusOK {
		t.Fatalf("/health: got %d; want 200", status)
	}
}

// A stream's events reach the client as the decode sends them, not once
// its answer is over.
func TestPairPassesStreamsOn(t *testing.T) {
	t.Parallel()
	prefill := listen(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
	next, over := make(chan struct{}), make(chan struct{})
	decode := listen(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString("data: {\"text\":\"a\"}\n\n")
			_ = w.Flush()
			select {
			case <-next:
			case <-over:
			}
			_, _ = w.WriteString("data: [DONE]\n\n")
		})
	})
	addr := startPair(t, prefill, decode)
	t.Cleanup(func() { close(over) }) // first: the servers wait for their handlers

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	body := `{"text": "hi", "stream" : true}`
	if _, err := fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: pair\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	resp := &fasthttp.Response{StreamBody: true}
	if err := resp.Read(bufio.NewReader(conn)); err != nil {
		t.Fatalf("no answer while the decode streams: %v", err)
	}
	first := make([]byte, len("data: {\"text\":\"a\"}\n\n"))
	if _, err := io.ReadFull(resp.BodyStream(), first); err != nil {
		t.Fatalf("no first event while the decode streams: %v", err)
	}
	close(next)
	rest, err := io.ReadAll(resp.BodyStream())
	if err != nil || string(first)+string(rest) != "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n" {
		t.Fatalf("got %q, %q, %v", first, rest, err)
	}
	if !bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		t.Fatalf("got content type %q", resp.Header.ContentType())
	}
}

func TestWantsStream(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stream":true}`:                           true,
		`{"text": "hi", "stream" : true}`:           true,
		`{"stream": false}`:                         false,
		`{"stream_options": {"a": true}}`:           false,
		`{"text": "hi"}`:                            false,
		`{"text": "hi", "stream": "true"}`:          false,
		`{"text": "hi", "stream":` + "\n" + `true}`: true,
	} {
		if got := wantsStream([]byte(body)); got != want {
			t.Errorf("wantsStream(%s) = %v; want %v", body, got, want)
		}
	}
}
