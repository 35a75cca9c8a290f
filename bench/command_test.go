package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/lb/cli"
)

// serveBench runs a fake /generate endpoint on a loopback port and returns
// its URL and a count of the requests it got.
func serveBench(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n.Add(1)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text":" a","meta_info":{"completion_tokens":1}}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String(), &n
}

// runBench parses args as `pdlb bench ARGS` and runs it with ctx.
func runBench(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	c, err := parse(t, append([]string{"-q", "--timeout", "5s"}, args...)...)
	if err != nil {
		t.Fatalf("cannot parse %q: %v", args, err)
	}
	var out, errOut bytes.Buffer
	err = c.run(ctx, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestBenchJSONStdout checks that `--json -` leaves standard output JSON
// alone: the table once came first on it.
func TestBenchJSONStdout(t *testing.T) {
	url, _ := serveBench(t)
	stdout, stderr, err := runBench(t, t.Context(), url, "-n", "2", "--json", "-")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ OK int }
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.OK != 2 {
		t.Fatalf("got stdout %q (ok %d, %v); want the JSON report of 2 ok requests alone", stdout, rep.OK, err)
	}
	if !strings.Contains(stderr, "throughput") {
		t.Fatalf("got stderr %q; want the table", stderr)
	}
}

// TestBenchJSONBadPath checks that a JSON file that cannot be created
// fails the run before any load: it once failed after the whole run.
func TestBenchJSONBadPath(t *testing.T) {
	url, requests := serveBench(t)
	path := filepath.Join(t.TempDir(), "missing", "r.json")
	_, _, err := runBench(t, t.Context(), url, "-n", "2", "--json", path)
	if err == nil || !strings.Contains(err.Error(), "cannot write the JSON report") {
		t.Fatalf("got error %v; want one about the JSON report", err)
	}
	if got := requests.Load(); got != 0 {
		t.Fatalf("the target got %d requests; want none", got)
	}
}

func TestBenchJSONFile(t *testing.T) {
	t.Parallel()
	url, _ := serveBench(t)
	path := filepath.Join(t.TempDir(), "r.json")
	stdout, _, err := runBench(t, t.Context(), url, "-n", "2", "--json", path)
	if err != nil || !strings.Contains(stdout, "throughput") {
		t.Fatalf("got error %v, stdout %q; want none, the table", err, stdout)
	}
	b, err := os.ReadFile(path)
	if err != nil || !json.Valid(b) {
		t.Fatalf("got %q, %v; want the JSON report", b, err)
	}
}

// TestBenchExitStatus checks the status after the report: 1 when no
// request succeeded (it was 0, so a mistyped port looked like a good run),
// 128 + the signal when interrupted, 0 otherwise.
func TestBenchExitStatus(t *testing.T) {
	t.Parallel()
	url, _ := serveBench(t)
	stdout, _, err := runBench(t, t.Context(), url, "-n", "2")
	if code := cli.ExitCode(err); code != 0 || !strings.Contains(stdout, "throughput") {
		t.Fatalf("reachable target: got status %d (%v); want 0 after the report", code, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	stdout, _, err = runBench(t, t.Context(), dead, "-n", "3")
	if code := cli.ExitCode(err); code != 1 || !strings.Contains(stdout, "connect 3") {
		t.Fatalf("dead target: got status %d (%v), stdout %q; want 1 after the report", code, err, stdout)
	}
	_, _, err = runBench(t, t.Context(), "--compare", "up="+url, "--compare", "down="+dead, "-d", "100ms", "--round", "100ms")
	if code := cli.ExitCode(err); code != 1 || !strings.Contains(err.Error(), "down") {
		t.Fatalf("compare with a dead target: got status %d (%v); want 1 naming it", code, err)
	}
	// It named the first alone.
	_, _, err = runBench(t, t.Context(), "--compare", "down1="+dead, "--compare", "up="+url, "--compare", "down2="+dead, "-d", "100ms", "--round", "100ms")
	if code := cli.ExitCode(err); code != 1 || err.Error() != "no request to down1 or down2 succeeded" {
		t.Fatalf("compare with two dead targets: got status %d (%v); want 1 naming both", code, err)
	}

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(signalError{syscall.SIGINT})
	stdout, _, err = runBench(t, ctx, url, "-d", "1m")
	if code := cli.ExitCode(err); code != 130 || !strings.Contains(stdout, "throughput") {
		t.Fatalf("interrupted: got status %d (%v), stdout %q; want 130 after the report", code, err, stdout)
	}
}

// TestCatchSignals sends this process SIGINT twice: the first cancels the
// context, the second exits at once (it was swallowed, and a run stuck
// connecting could not be stopped).
func TestCatchSignals(t *testing.T) {
	exited := make(chan int, 1)
	var clock atomic.Int64 // the signals' clock: moved by the test alone
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	ctx, stop := catchSignals(func(code int) { exited <- code }, now)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first SIGINT did not cancel the context")
	}
	var se signalError
	if !errors.As(context.Cause(ctx), &se) || se.exitCode() != 130 {
		t.Fatalf("got cause %v; want SIGINT", context.Cause(ctx))
	}
	clock.Add(int64(cli.SameSignalWindow)) // not the first delivered twice
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 130 {
			t.Fatalf("got exit status %d; want 130", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGINT did not exit")
	}
}

// --header and --api-key reach the target with every request; a header
// without a name is refused before any load.
func TestBenchHeaders(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan [2]string, 8)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		select {
		case got <- [2]string{string(ctx.Request.Header.Peek("Authorization")), strings.Join(headerValues(&ctx.Request.Header, "X-Team"), ",") + "|" + string(ctx.Host())}:
		default:
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text":" a","meta_info":{"completion_tokens":1}}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	url := "http://" + ln.Addr().String()
	if _, _, err = runBench(t, t.Context(), url, "-n", "2", "--api-key", "k1", "-H", "X-Team:  blue "); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h[0] != "Bearer k1" || !strings.HasPrefix(h[1], "blue|") {
		t.Fatalf("the target got Authorization %q, X-Team %q; want %q, %q", h[0], h[1], "Bearer k1", "blue")
	}
	if _, _, err := runBench(t, t.Context(), url, "-n", "1", "-H", "no colon"); err == nil || !strings.Contains(err.Error(), "want 'NAME: VALUE'") {
		t.Fatalf("got %v; want a refusal of the header", err)
	}

	// A name given twice sends both values, as curl does.
	for len(got) > 0 {
		<-got
	}
	if _, _, err := runBench(t, t.Context(), url, "-n", "1", "-H", "X-Team: blue", "-H", "x-team: red", "-H", "Host: example.test"); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h[1] != "blue,red|example.test" {
		t.Fatalf("the target got X-Team and Host %q; want both values, blue,red, and example.test", h[1])
	}

	// Two ways of setting Authorization at once is a mistake to point out,
	// not a choice to make silently.
	_, _, err = runBench(t, t.Context(), url, "-n", "1", "--api-key", "k1", "-H", "authorization: Bearer k2")
	if err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("got %v; want a refusal of --api-key with an Authorization header", err)
	}
}

// headerValues is every value of a header the request carries.
func headerValues(h *fasthttp.RequestHeader, name string) []string {
	var vs []string
	for _, v := range h.PeekAll(name) {
		vs = append(vs, string(v))
	}
	return vs
}

// An explicit -c 0 is a mistake, refused before any load; no -c at all is
// one client.
func TestBenchConcurrency(t *testing.T) {
	for _, c := range []string{"-c0", "--concurrency=-2"} {
		_, _, err := runBench(t, t.Context(), "http://127.0.0.1:1", "-n", "1", c)
		if err == nil || !strings.Contains(err.Error(), "want at least 1 client") {
			t.Errorf("%s: got %v; want a refusal", c, err)
		}
	}
	cfg := benchDefaults(t)
	if cfg.Concurrency != 0 { // Config's zero: its default, 1 client
		t.Errorf("no -c gave Concurrency %d; want 0, the default", cfg.Concurrency)
	}
}

// An explicit --rate or --duration of 0 or less is a mistake, refused
// before any load: --rate 0 ran a closed loop, -d 0s ran for 10 s. Not
// given, they are Config's zero, its default.
func TestBenchRateAndDuration(t *testing.T) {
	for _, args := range [][]string{
		{"--rate", "0"}, {"--rate=-2"}, {"--rate", "NaN"}, {"-d", "0s"}, {"--duration=-1s"},
	} {
		_, _, err := runBench(t, t.Context(), append([]string{"http://127.0.0.1:1", "-n", "1"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "want more than 0") || cli.ExitCode(err) != 2 {
			t.Errorf("%q: got %v, exit status %d; want a refusal, 2", args, err, cli.ExitCode(err))
		}
	}
	cfg := benchDefaults(t)
	if cfg.Rate != 0 || cfg.Duration != 0 {
		t.Errorf("no --rate, no -d gave Rate %v, Duration %v; want 0, 0, the defaults", cfg.Rate, cfg.Duration)
	}
	c, err := parse(t, "http://127.0.0.1:1", "--rate", "2.5", "-d", "3s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = c.config(); err != nil || cfg.Rate != 2.5 || cfg.Duration != 3*time.Second {
		t.Errorf("--rate 2.5 -d 3s gave Rate %v, Duration %v, error %v; want 2.5, 3s", cfg.Rate, cfg.Duration, err)
	}
}

// --timeout 0 is no limit, as its help says; it was Config's zero,
// the default of 60 s.
func TestBenchNoTimeout(t *testing.T) {
	c, err := parse(t, "http://127.0.0.1:1", "--timeout", "0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil || cfg.Timeout != NoTimeout {
		t.Fatalf("got timeout %v, error %v; want NoTimeout", cfg.Timeout, err)
	}
	url, _ := serveBench(t)
	stdout, _, err := runBench(t, t.Context(), url, "-n", "2", "--timeout", "0", "--json", "-")
	if err != nil || !strings.Contains(stdout, `"ok": 2`) || !strings.Contains(stdout, `"timeout_s": 0,`) {
		t.Fatalf("got error %v, report %s; want 2 ok requests, timeout_s 0", err, stdout)
	}
}

// benchDefaults is the Config of a command line that gives no flag.
func benchDefaults(t *testing.T) Config {
	t.Helper()
	c, err := parse(t, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A URL that ends in a route is sent to that route: `pdlb bench
// http://h:p/generate` was sent to /generate/generate, and ended with
// thousands of 404s and no warning (issue 20). A --route that contradicts
// it is refused before any load, naming both.
func TestBenchRouteInURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int32
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		requests.Add(1)
		ctx.SetContentType("application/json")
		if string(ctx.Path()) != "/generate" {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			ctx.SetBodyString(`{"detail":"Not Found"}`)
			return
		}
		ctx.SetBodyString(`{"text":" a","meta_info":{"completion_tokens":1}}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	url := "http://" + ln.Addr().String() + "/generate"

	for _, args := range [][]string{{url}, {url, "--route", "/generate"}, {"--compare", "a=" + url}} {
		bound := []string{"-n", "2"}
		if args[0] == "--compare" {
			bound = []string{"-d", "100ms", "--round", "100ms"}
		}
		stdout, _, err := runBench(t, t.Context(), append(args, bound...)...)
		if err != nil || !strings.Contains(stdout, url+" (") || strings.Contains(stdout, "status_404") {
			t.Fatalf("%q: got error %v, report\n%s\nwant requests to %s, all ok", args, err, stdout, url)
		}
	}

	before := requests.Load()
	for _, args := range [][]string{
		{url, "--route", "/v1/completions", "-n", "1"},
		{"--compare", "a=http://127.0.0.1:1", "--compare", "b=" + url, "--route", "/v1/chat/completions", "-d", "1s"},
	} {
		_, _, err := runBench(t, t.Context(), args...)
		want := "the URL " + url + " ends in the route /generate, but --route is /v1"
		if code := cli.ExitCode(err); code != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, exit status %d; want a usage error, 2, containing %q", args, err, code, want)
		}
	}
	if got := requests.Load(); got != before {
		t.Fatalf("the refused command lines sent %d requests; want none", got-before)
	}
}

// A target that fails every request is given up after --give-up-after,
// with a status of 1 and the failures' message; it once took the whole
// run, thousands of failures a second (issue 20). --give-up-after 0 is
// never.
func TestBenchGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"detail":"Not Found"}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	url := "http://" + ln.Addr().String()

	// The 10 s are a failure deadline: the run gives up within
	// milliseconds, after 5 failures.
	stdout, _, err := runBench(t, t.Context(), url, "-d", "10s", "--give-up-after", "1ms")
	if code := cli.ExitCode(err); code != 1 || !strings.HasPrefix(err.Error(), "gave up on "+url+": no request succeeded in ") ||
		!strings.HasSuffix(err.Error(), "; the last: status_404: Not Found") {
		t.Fatalf("got status %d (%v); want 1, giving up on the target with its message", code, err)
	}
	if !strings.Contains(stdout, "gave up      no request succeeded") || !strings.Contains(stdout, "messages     status_404 ") {
		t.Fatalf("got report\n%s\nwant it to say why it gave up, and the message", stdout)
	}

	c, err := parse(t, url, "--give-up-after", "0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := c.config(); err != nil || cfg.GiveUpAfter != NoGiveUp {
		t.Fatalf("--give-up-after 0 gave %v, error %v; want NoGiveUp", cfg.GiveUpAfter, err)
	}
	if cfg := benchDefaults(t); cfg.GiveUpAfter != 3*time.Second {
		t.Fatalf("no --give-up-after gave %v; want 3s", cfg.GiveUpAfter)
	}
}

// The progress display is a redrawn bar on a terminal, plain lines on
// anything else (there was none at all), nothing with --quiet.
func TestBenchProgressOn(t *testing.T) {
	var buf bytes.Buffer
	if w, lines := progressOn(&buf, false); w != &buf || !lines {
		t.Errorf("a buffer: got %v, lines %v; want it, lines", w, lines)
	}
	if w, _ := progressOn(&buf, true); w != nil {
		t.Errorf("--quiet: got %v; want none", w)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, lines := progressOn(f, false); !lines {
		t.Error("a file: got a redrawn line; want lines")
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, lines := progressOn(null, false); !lines {
		t.Error("/dev/null, a character device: got a redrawn line; want lines")
	}
	// The master side of a pseudo-terminal answers as a terminal does.
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to check a terminal with: %v", err)
	}
	defer pty.Close()
	if _, lines := progressOn(pty, false); lines {
		t.Error("a terminal: got lines; want the redrawn line")
	}
}

// The examples in bench's help parse.
func TestBenchHelpExamplesParse(t *testing.T) {
	examples := 0
	for line := range strings.Lines((&Command{}).Help()) {
		args, ok := strings.CutPrefix(strings.TrimSpace(line), "pdlb bench ")
		if !ok {
			continue
		}
		examples++
		if _, err := parse(t, strings.Fields(args)...); err != nil {
			t.Errorf("example %q: %v", line, err)
		}
	}
	if examples == 0 {
		t.Fatal("got no example in the help")
	}
}

// parse parses args as `pdlb bench ARGS`, with the number readers main
// gives every command.
func parse(t *testing.T, args ...string) (*Command, error) {
	t.Helper()
	var c Command
	return &c, cli.ParseCommand(&c, args...)
}

// A usage error found after parsing exits with status 2, as argparse's do,
// not 1, the status of a failure at run time.
func TestUsageErrorsExitWithStatus2(t *testing.T) {
	c, err := parse(t, "http://127.0.0.1:1", "-c0")
	if err != nil {
		t.Fatal(err)
	}
	err = c.run(t.Context(), io.Discard, io.Discard)
	if code := cli.ExitCode(err); code != 2 {
		t.Errorf("bench -c0: got %v, exit status %d; want 2", err, code)
	}
	for _, args := range [][]string{
		{"127.0.0.1:1"}, {"--compare", "noequals"},
		{"http://127.0.0.1:99999"}, {"--compare", "a=http://127.0.0.1:99999"},
	} {
		c, err := parse(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		err = c.run(t.Context(), io.Discard, io.Discard)
		if code := cli.ExitCode(err); code != 2 {
			t.Errorf("%q: got %v, exit status %d; want 2", args, err, code)
		}
	}
}
