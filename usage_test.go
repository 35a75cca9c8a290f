package main

import (
	"bytes"
	"strings"
	"testing"
)

// A flag removed from sglang_router, or from the first mini_lb launchers,
// is a usage error that names what to write instead, where kong called it
// unknown (issue 20), with argparse's exit status 2.
func TestRemovedFlagsNameTheirReplacement(t *testing.T) {
	workers := []string{"--prefill", "http://p:1", "--decode", "http://d:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pd-disaggregated"}, "--pd-disaggregated was removed: use --pd-disaggregation"},
		{[]string{"--verbose"}, "--verbose was removed: use --log-level debug"},
		{[]string{"--eviction-interval", "60"}, "--eviction-interval was removed: use --eviction-interval-secs"},
		{[]string{"--eviction-interval=60"}, "--eviction-interval was removed: use --eviction-interval-secs"},
		{[]string{"--prefill-bootstrap-ports", "8998", "8999"}, "--prefill-bootstrap-ports was removed: give each prefill its bootstrap port after its URL (--prefill URL PORT)"},
		{[]string{"--timeout", "600"}, "--timeout was removed: use --request-timeout-secs"},
		{[]string{"--rust-lb"}, "--rust-lb was removed: drop it (pdlb is the load balancer)"},
		{[]string{"--log-interval", "5"}, "--log-interval was removed: drop it (pdlb serves its counters on /metrics"},
	} {
		var out bytes.Buffer
		code := -1
		runMain(append(append([]string{}, workers...), tc.args...), &out, &out, func(c int) { code = c })
		if code != 2 || !strings.Contains(out.String(), "pdlb: error: "+tc.want) {
			t.Errorf("%q: got status %d, output %q; want 2 and %q", tc.args, code, out.String(), tc.want)
		}
		if strings.Contains(out.String(), "unknown flag") {
			t.Errorf("%q: got %q; want no unknown flag", tc.args, out.String())
		}
	}
	// A tool's arguments are its own.
	if _, _, err := parse(t, "bench", "--verbose", "http://x"); err == nil || strings.Contains(err.Error(), "was removed") {
		t.Errorf("bench --verbose: got %v; want bench's own unknown flag", err)
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
