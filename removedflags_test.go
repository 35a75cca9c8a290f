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
	// A removed flag is neither one pdlb implements nor one sglang_router
	// still has: those run.
	var c commands
	parser, err := newParser(&c, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	serve, router := serveFlagNames(parser), routerFlags()
	for name := range removedFlags() {
		if _, ok := router[name]; ok || serve[name] != nil {
			t.Errorf("--%s is in removedFlags, and a flag of serve or of current sglang_router", name)
		}
	}
}
