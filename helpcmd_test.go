package main

import (
	"bytes"
	"strings"
	"testing"
)

// runToExit runs main with args until it exits, and returns its output
// and exit status.
func runToExit(t *testing.T, args ...string) (out string, code int) {
	t.Helper()
	type exited struct{ code int }
	var buf bytes.Buffer
	defer func() {
		// main exits after printing the help; the panic below stops it
		// there, as os.Exit would.
		if r := recover(); r != nil {
			e, ok := r.(exited)
			if !ok {
				panic(r)
			}
			out, code = buf.String(), e.code
		}
	}()
	runMain(args, &buf, &buf, func(c int) { panic(exited{c}) })
	t.Fatalf("%q did not exit; output %q", args, buf.String())
	return "", 0
}

// `pdlb help` prints the top-level help, and `pdlb help COMMAND` that
// command's, as go and kubectl do: it was "unexpected argument help", as
// serve, the default command, took it for an argument of its own.
func TestHelpCommand(t *testing.T) {
	for _, tc := range []struct {
		args, same []string
		want       string // a line of the help that shows it is the right one
	}{
		{[]string{"help"}, []string{"--help"}, "Commands:"},
		{[]string{"help", "bench"}, []string{"bench", "--help"}, "Usage: pdlb bench"},
		{[]string{"help", "serve"}, []string{"serve", "--help"}, "Usage: pdlb serve"},
		{[]string{"help", "fake"}, []string{"fake", "--help"}, "Usage: pdlb fake"},
	} {
		got, code := runToExit(t, tc.args...)
		want, _ := runToExit(t, tc.same...)
		if code != 0 || got != want || !strings.Contains(got, tc.want) {
			t.Errorf("%q: got status %d and\n%s\nwant status 0 and what %q prints, with %q", tc.args, code, got, tc.same, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "nosuch"}, `pdlb: error: no help for "nosuch": pdlb's commands are serve, fake, bench, relay, pair`},
		{[]string{"help", "bench", "serve"}, "pdlb: error: help takes one command at most: pdlb help [serve|fake|bench|relay|pair]"},
	} {
		if got, code := runToExit(t, tc.args...); code != 2 || !strings.Contains(got, tc.want) {
			t.Errorf("%q: got status %d, output %q; want 2 and %q", tc.args, code, got, tc.want)
		}
	}
}

// A worker flag with no URL after it says what it wants: --prefill alone
// said `expected prefill URL value but got "EOL" (<EOL>)`, and before
// another flag suggested --prefill="--decode".
func TestWorkerFlagWithoutURL(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefill"}, "--prefill needs a worker URL, e.g. --prefill http://10.0.0.1:30000 8998"},
		{[]string{"serve", "--prefill"}, "--prefill needs a worker URL, e.g. --prefill http://10.0.0.1:30000 8998"},
		{[]string{"--prefill", "--decode", "http://d:1"}, "--prefill needs a worker URL, e.g. --prefill http://10.0.0.1:30000 8998"},
		{[]string{"--prefill", "http://p:1", "--decode"}, "--decode needs a worker URL, e.g. --decode http://10.0.0.2:30010"},
		{[]string{"--prefill", "http://p:1", "--decode", "http://d:1", "--fallback", "--port", "8000"},
			"--fallback needs a worker URL, e.g. --fallback http://10.0.0.3:30000"},
		{[]string{"--prefill=", "--decode", "http://d:1"}, "--prefill needs a worker URL, e.g. --prefill http://10.0.0.1:30000 8998"},
	} {
		got, code := runToExit(t, tc.args...)
		if code != 2 || !strings.Contains(got, "pdlb: error: "+tc.want+"\n") {
			t.Errorf("%q: got status %d, output %q; want 2 and %q", tc.args, code, got, tc.want)
		}
	}
	// Lines with their URLs parse, a port or a negative number after a
	// prefill's URL included, and a tool's --prefill is its own.
	for _, args := range [][]string{
		{"--prefill", "http://p:1", "8998", "--decode", "http://d:1"},
		{"--prefill=http://p:1", "--decode=http://d:1", "--fallback", "http://a:1"},
		{"fake", "--prefill", "127.0.0.1:1"},
	} {
		if _, _, err := parse(t, args...); err != nil {
			t.Errorf("%q: got %v; want no error", args, err)
		}
	}
}

// `pdlb bench --help` shows examples, each a command line pdlb takes, and
// placeholders that say what a flag wants.
func TestBenchHelp(t *testing.T) {
	var out bytes.Buffer
	code := -1
	runMain([]string{"bench", "--help"}, &out, &out, func(c int) {
		if code == -1 { // exit returns here, and the parse goes on
			code = c
		}
	})
	help := out.String()
	for _, want := range []string{"Examples:", "  -c, --concurrency=N ", "  -n, --requests=N ", "  --route=PATH ", "  --give-up-after=3s "} {
		if code != 0 || !strings.Contains(help, want) {
			t.Fatalf("got status %d, help\n%s\nwant 0 and %q", code, help, want)
		}
	}
}
