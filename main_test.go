package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"pdlb/lb/cli"
	"pdlb/lb/serve"
)

// parse parses args as main does, without running the command.
func parse(t *testing.T, args ...string) (*commands, serve.IgnoredFlags, error) {
	t.Helper()
	var c commands
	var out bytes.Buffer
	parser, err := newParser(&c, &out, &out)
	if err != nil {
		t.Fatalf("cannot build the parser: %s", err)
	}
	_, ignored, err := parseArgs(parser, &c, args)
	return &c, ignored, err
}

// The tools' repeatable flags take lists from the environment too.
func TestParseToolListsFromTheEnvironment(t *testing.T) {
	t.Setenv("PDLB_FAKE_DECODE", "127.0.0.1:1, 127.0.0.1:2")
	t.Setenv("PDLB_BENCH_COMPARE", "a=http://x:1,b=http://y:2")
	c, _, err := parse(t, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if got := cli.ListItems(c.Fake.Decode); !reflect.DeepEqual(got, []string{"127.0.0.1:1", "127.0.0.1:2"}) {
		t.Errorf("fake decodes %q; want two", got)
	}
	if c, _, err = parse(t, "bench"); err != nil {
		t.Fatal(err)
	}
	if len(c.Bench.Compare) != 2 {
		t.Errorf("bench targets %q; want two", c.Bench.Compare)
	}
}

// A usage error a command finds once the line is parsed (bench's --rate 0,
// -c 0) points to that command's help too, and exits with status 2.
func TestUsageHintAfterParsing(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "http://127.0.0.1:1", "--rate", "0"},
		{"bench", "http://127.0.0.1:1", "-c", "0"},
	} {
		var out bytes.Buffer
		code := -1
		runMain(args, &out, &out, func(c int) { code = c })
		if code != 2 || !strings.Contains(out.String(), `Run "pdlb bench --help" for its flags.`) {
			t.Errorf("%q: got status %d, output %q; want 2 and bench's help hint", args, code, out.String())
		}
	}
}

// A usage error kong finds points to the help of the command it is in:
// bench's pointed to serve's.
func TestUsageHint(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--rate", "abc", "http://x"}, `Run "pdlb bench --help" for its flags.`},
		{[]string{"bench"}, `Run "pdlb bench --help" for its flags.`},
		{[]string{"bench", "--max-new-tokens", "lognormal:1:1e200", "http://x"}, `Run "pdlb bench --help" for its flags.`},
		{[]string{"fake", "--bogus"}, `Run "pdlb fake --help" for its flags.`},
		{[]string{"--prefill", "http://p:1", "--bogus"}, `Run "pdlb serve --help" for the load balancer's flags, "pdlb COMMAND --help" for a tool's.`},
		{[]string{"serve", "--bogus"}, `Run "pdlb serve --help" for the load balancer's flags, "pdlb COMMAND --help" for a tool's.`},
	} {
		_, _, err := parse(t, tc.args...)
		if err == nil {
			t.Fatalf("%q: got no error; want a usage error", tc.args)
		}
		if got := usageHint(err); got != tc.want {
			t.Errorf("%q: got hint %q; want %q", tc.args, got, tc.want)
		}
	}
}

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
