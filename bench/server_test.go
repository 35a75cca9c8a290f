package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"github.com/valyala/fastjson"
)

// serve runs h as a fake endpoint on an in-memory listener and returns a
// Config that dials it, with a failure deadline per request.
func serve(t *testing.T, h fasthttp.RequestHandler) Config {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	// Cut connections are the point of some tests; don't log them.
	srv := &fasthttp.Server{Handler: h, Logger: discard{}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = ln.Close() })
	return Config{
		URL:     "http://fake.test",
		Timeout: 5 * time.Second,
		Dial:    func(context.Context, string) (net.Conn, error) { return ln.Dial() },
	}
}

// discard is a fasthttp.Logger that drops everything.
type discard struct{}

func (discard) Printf(string, ...any) {}

// recorder keeps what a fake endpoint received.
type recorder struct {
	mu     sync.Mutex
	paths  []string
	bodies []string
}

func (rc *recorder) add(ctx *fasthttp.RequestCtx) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.paths = append(rc.paths, string(ctx.Path()))
	rc.bodies = append(rc.bodies, string(ctx.PostBody()))
	return len(rc.bodies)
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.bodies)
}

// jsonHandler answers every request with status and body, recording it.
func jsonHandler(rc *recorder, status int, body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		rc.add(ctx)
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

// streamHandler answers with an event stream of events, one "data:" line
// each, calling wait(i) before event i so a test can hold or pace them.
// A nil wait sends them at once.
func streamHandler(rc *recorder, events []string, wait func(i int)) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		rc.add(ctx)
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i, ev := range events {
				if wait != nil {
					wait(i)
				}
				fmt.Fprintf(w, "data: %s\n\n", ev)
				if err := w.Flush(); err != nil {
					return
				}
			}
		})
	}
}

// pause simulates generation time in a fake endpoint. It delays an event by
// a known amount; it does not synchronise the test with anything.
func pause(d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	<-tm.C
}

// checkBody reports what is wrong with a request body the generator built
// for cfg (defaults applied).
func checkBody(cfg Config, body string) error {
	v, err := fastjson.Parse(body)
	if err != nil {
		return fmt.Errorf("body is not JSON: %w: %s", err, body)
	}
	var prompt string
	if cfg.Route == RouteGenerate {
		prompt = string(v.GetStringBytes("text"))
		if got := v.GetInt("sampling_params", "max_new_tokens"); !inDist(cfg.MaxNewTokens, got) {
			return fmt.Errorf("got max_new_tokens %d; want %s", got, cfg.MaxNewTokens)
		}
		if !v.GetBool("sampling_params", "ignore_eos") {
			return fmt.Errorf("got no sampling_params.ignore_eos in %s", body)
		}
	} else {
		if got := string(v.GetStringBytes("model")); got != cfg.Model {
			return fmt.Errorf("got model %q; want %q", got, cfg.Model)
		}
		if got := v.GetInt("max_tokens"); !inDist(cfg.MaxNewTokens, got) {
			return fmt.Errorf("got max_tokens %d; want %s", got, cfg.MaxNewTokens)
		}
		if got := v.GetBool("stream_options", "include_usage"); got != cfg.Stream {
			return fmt.Errorf("got stream_options.include_usage %v; want %v", got, cfg.Stream)
		}
		prompt = string(v.GetStringBytes("prompt"))
		if cfg.Route == RouteChatCompletions {
			if got := string(v.GetStringBytes("messages", "0", "role")); got != "user" {
				return fmt.Errorf("got role %q; want %q", got, "user")
			}
			prompt = string(v.GetStringBytes("messages", "0", "content"))
		}
	}
	if got := v.Get("stream"); got == nil || got.Type() == fastjson.TypeNull || v.GetBool("stream") != cfg.Stream {
		return fmt.Errorf("got stream %v; want %v", got, cfg.Stream)
	}
	if got := len(strings.Fields(prompt)); !inDist(cfg.PromptWords, got) {
		return fmt.Errorf("got prompt of %d words; want %s: %q", got, cfg.PromptWords, prompt)
	}
	return nil
}

// inDist reports whether d can draw n: n itself for a fixed Dist, a value
// between the bounds for a uniform one, any allowed size otherwise.
func inDist(d Dist, n int) bool {
	switch d.Law {
	case LawFixed:
		return float64(n) == d.A
	case LawUniform:
		return float64(n) >= d.A && float64(n) <= d.B
	}
	return n >= 1 && n <= maxDraw
}

// run calls Run and fails the test on an error.
// runAsync runs cfg until ctx ends, in the background; its report comes on
// the channel.
func runAsync(t *testing.T, ctx context.Context, cfg Config) <-chan *Report {
	done := make(chan *Report, 1)
	go func() {
		rep, err := Run(ctx, cfg)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- rep
	}()
	return done
}

// runUntil runs cfg until reached signals, what is described by what,
// then cuts the run, as an interrupt does, and returns its report.
func runUntil(t *testing.T, cfg Config, reached <-chan struct{}, what string) *Report {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := runAsync(t, ctx, cfg)
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never happened", what)
	}
	cancel()
	select {
	case rep := <-done:
		return rep
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	return nil
}

func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

// checkCounts checks a report's request counts.
func checkCounts(t *testing.T, rep *Report, requests, ok int) {
	t.Helper()
	if rep.Requests != requests || rep.OK != ok {
		t.Fatalf("got %d requests, %d ok; want %d, %d (errors %v)", rep.Requests, rep.OK, requests, ok, rep.Errors)
	}
}
