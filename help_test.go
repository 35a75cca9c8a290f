package main

import (
	"bytes"
	"strings"
	"testing"
)

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
