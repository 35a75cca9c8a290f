package serve

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// The DNS flags reach lb.Config, with their defaults; a pool they fill may
// be given no worker on the command line, and pdlb starts with it empty
// (issue 23 §1, §3).
func TestParseDNSFlags(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode-dns", "d.pdlb.test:30010", "--decode-dns", "e.pdlb.test,f.pdlb.test",
		"--fallback-dns", "g.pdlb.test", "--dns-server", "127.0.0.1:5353")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.Serve.config()
	want := lb.DNSConfig{
		Decode:      []string{"d.pdlb.test:30010", "e.pdlb.test", "f.pdlb.test"},
		Fallback:    []string{"g.pdlb.test"},
		Refresh:     5 * time.Second,
		RemoveAfter: 30 * time.Second,
		Server:      "127.0.0.1:5353",
	}
	if !reflect.DeepEqual(cfg.DNS, want) {
		t.Fatalf("got %+v; want %+v", cfg.DNS, want)
	}
	if _, err := lb.New(cfg, zerolog.Nop()); err != nil {
		t.Fatalf("--decode-dns without --decode: %s; want pdlb to start with no decode", err)
	}

	t.Setenv("PDLB_PREFILL_DNS", "p.pdlb.test,q.pdlb.test:30000")
	t.Setenv("PDLB_DNS_REFRESH_SECS", "2")
	c, _, err = parse(t, "--decode", "http://d:1", "--dns-remove-after-secs", "60")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = c.Serve.config()
	if got := cfg.DNS; !reflect.DeepEqual(got.Prefill, []string{"p.pdlb.test", "q.pdlb.test:30000"}) ||
		got.Refresh != 2*time.Second || got.RemoveAfter != time.Minute {
		t.Fatalf("from the environment: got %+v", got)
	}

	c, _, err = parse(t, "--prefill", "http://p:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = c.Serve.config()
	// Nothing to find either: the pool starts empty, for the worker API.
	if err := cfg.Validate(); err != nil {
		t.Fatalf("no decode and no --decode-dns: %s; want pdlb to start with the pool empty", err)
	}
}

// --drain-timeout-secs defaults to the shutdown grace period: a worker
// leaving gets what a shutdown gives every worker.
func TestParseDrainTimeout(t *testing.T) {
	f := func(want time.Duration, args ...string) {
		t.Helper()
		c, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode", "http://d:1"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg, _ := c.Serve.config(); cfg.DrainTimeout != want {
			t.Fatalf("%q: got drain timeout %s; want %s", args, cfg.DrainTimeout, want)
		}
	}
	f(180 * time.Second)
	f(60*time.Second, "--shutdown-grace-period-secs", "60")
	f(20*time.Second, "--shutdown-grace-period-secs", "60", "--drain-timeout-secs", "20")
}

// A DNS or drain flag's bad value is a usage error naming the flag; so is
// a name that is not one.
func TestParseBadDNSValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dns-refresh-secs", "0"}, "--dns-refresh-secs"},
		{[]string{"--dns-remove-after-secs", "-1"}, "--dns-remove-after-secs"},
		{[]string{"--dns-server", "127.0.0.1"}, "--dns-server"},
		{[]string{"--dns-server", "127.0.0.1:99999"}, "--dns-server"},
		{[]string{"--dns-server", ":53"}, "--dns-server"},
		{[]string{"--drain-timeout-secs", "-1"}, "--drain-timeout-secs"},
	} {
		_, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode-dns", "d.pdlb.test"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v; want an error naming %s", tc.args, err, tc.want)
		}
	}
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode-dns", "d.pdlb.test:http")
	if err != nil {
		t.Fatal(err)
	}
	c.Serve.LogLevel = "error"
	if err := c.Serve.Run(nil, func(code int) { t.Errorf("serve exited with status %d; want a usage error returned", code) }, "test"); err == nil ||
		!strings.Contains(err.Error(), "d.pdlb.test:http") || cli.ExitCode(err) != 2 {
		t.Errorf("a bad --decode-dns name: got %v; want a usage error naming it", err)
	}
}
