package main

import (
	"bytes"
	"strings"
	"testing"

	"pdlb/lb/serve"
)

// A bad number names the flag and what it takes, not the Go type kong
// decodes it to: --port abc said "expected a valid 64 bit int" (issue 20).
func TestNumberFlagsSayWhatTheyWant(t *testing.T) {
	workers := []string{"--prefill", "http://p:1", "--decode", "http://d:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "abc"}, `--port: expected a port number 1-65535, got "abc"`},
		{[]string{"--port", "0"}, `--port: expected a port number 1-65535, got "0"`},
		{[]string{"--port", "65536"}, `--port: expected a port number 1-65535, got "65536"`},
		{[]string{"--port", "-1"}, `--port: expected a port number 1-65535, got "-1"`},
		{[]string{"--port=8000.5"}, `--port: expected a port number 1-65535, got "8000.5"`},
		{[]string{"--prometheus-port", "metrics"}, `--prometheus-port: expected a port number 1-65535, or 0 for none, got "metrics"`},
		{[]string{"--prometheus-port", "70000"}, `--prometheus-port: expected a port number 1-65535, or 0 for none, got "70000"`},
		{[]string{"--prefill", "http://q:1", "abc"}, `--prefill: invalid bootstrap port "abc" for prefill http://q:1: expected a port number 1-65535, or none`},
		{[]string{"--request-timeout-secs", "30s"}, `--request-timeout-secs: expected a whole number of seconds, got "30s"`},
		{[]string{"--connect-timeout-secs", "2s"}, `--connect-timeout-secs: expected a number of seconds, got "2s"`},
		{[]string{"--max-body-memory", "1GB"}, `--max-body-memory: expected a whole number, got "1GB"`},
		{[]string{"--max-connections", "99999999999999999999"}, `--max-connections: expected a whole number, got "99999999999999999999", which is out of range`},
	} {
		_, _, err := parse(t, append(append([]string{}, workers...), tc.args...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got error %v; want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fake", "--decode", "127.0.0.1:1", "--bootstrap-port", "x"}, `--bootstrap-port: expected a port number 1-65535, got "x"`},
		{[]string{"pair", "--listen", ":1", "--prefill", "p:1", "--decode", "d:1", "--bootstrap-port", "0"}, `--bootstrap-port: expected a port number 1-65535, got "0"`},
		{[]string{"bench", "--seed=x", "http://x"}, `--seed: expected a whole number, 0 or more, got "x"`},
	} {
		if _, _, err := parse(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: got error %v; want %q", tc.args, err, tc.want)
		}
	}

	// From the environment too, and a usage error (status 2) as kong's were.
	t.Setenv("PDLB_PORT", "abc")
	var out bytes.Buffer
	code := -1
	runMain(workers, &out, &out, func(c int) { code = c })
	if want := `pdlb: error: --port: expected a port number 1-65535, got "abc"`; code != 2 || !strings.Contains(out.String(), want) {
		t.Errorf("PDLB_PORT=abc: got status %d, output %q; want 2 and %q", code, out.String(), want)
	}
}

// Numbers are read as argparse's int() and float() read them: decimal
// (kong took "08000" for octal), and --prometheus-port 0 is off.
func TestNumberFlagsAreDecimal(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--port", "08000",
		"--prometheus-port", "0", "--connect-timeout-secs", "2.5", "--max-concurrent-requests", "-1")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Serve
	if s.Port != 8000 || s.PrometheusPort != 0 || s.ConnectTimeoutSecs != 2.5 || s.MaxConcurrentRequests != -1 {
		t.Errorf("got port %d, prometheus port %d, connect timeout %v, max concurrent %d; want 8000, 0, 2.5, -1",
			s.Port, s.PrometheusPort, s.ConnectTimeoutSecs, s.MaxConcurrentRequests)
	}
}

// What Python's int() and float() take, argparse and so sglang_router take:
// underscores between digits, a sign, surrounding spaces; 0 written any way
// turns a listener off.
func TestNumberFlagsReadAsPythonDoes(t *testing.T) {
	for _, tc := range []struct {
		flag, value string
		got         func(*serve.Command) float64
		want        float64
	}{
		{"--request-timeout-secs", "1_800", func(s *serve.Command) float64 { return float64(s.RequestTimeoutSecs) }, 1800},
		{"--port", " 8_000 ", func(s *serve.Command) float64 { return float64(s.Port) }, 8000},
		{"--port", "+8000", func(s *serve.Command) float64 { return float64(s.Port) }, 8000},
		{"--prometheus-port", "00", func(s *serve.Command) float64 { return float64(s.PrometheusPort) }, 0},
		{"--prometheus-port", "-0", func(s *serve.Command) float64 { return float64(s.PrometheusPort) }, 0},
		{"--connect-timeout-secs", "1_0.5", func(s *serve.Command) float64 { return s.ConnectTimeoutSecs }, 10.5},
	} {
		c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", tc.flag, tc.value)
		if err != nil {
			t.Errorf("%s %q: %v", tc.flag, tc.value, err)
			continue
		}
		if got := tc.got(&c.Serve); got != tc.want {
			t.Errorf("%s %q: got %v; want %v", tc.flag, tc.value, got, tc.want)
		}
	}
	for _, bad := range []string{"1__800", "_1800", "1800_", "0x10"} {
		if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--request-timeout-secs", bad); err == nil {
			t.Errorf("--request-timeout-secs %q was taken; want a usage error, as Python's int() refuses it", bad)
		}
	}
}
