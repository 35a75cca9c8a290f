package serve

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// root stands for main's command line: serve as the default command,
// beside tools whose arguments are their own.
type root struct {
	Serve   Command          `cmd:"" default:"withargs"`
	Fake    tool             `cmd:""`
	Bench   tool             `cmd:""`
	Relay   tool             `cmd:""`
	Pair    tool             `cmd:""`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

// tool stands for one of pdlb's tools.
type tool struct {
	URL     string `arg:"" optional:""`
	Prefill []string
}

// newParser builds a parser of c with the options main gives pdlb's: the
// environment variables, serve's help, the number readers.
func newParser(c *root, stdout, stderr io.Writer, options ...kong.Option) (*kong.Kong, error) {
	return kong.New(c, slices.Concat([]kong.Option{
		kong.Name("pdlb"),
		cli.Envars("serve"),
		kong.Vars{"version": "test"},
		kong.Writers(stdout, stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
	}, Options(), cli.NumberMappers(), options)...)
}

// parse parses args as main does, without running the command.
func parse(t *testing.T, args ...string) (*root, IgnoredFlags, error) {
	t.Helper()
	var c root
	var out bytes.Buffer
	parser, err := newParser(&c, &out, &out)
	if err != nil {
		t.Fatalf("cannot build the parser: %s", err)
	}
	_, ignored, err := Parse(parser, &c.Serve, args)
	return &c, ignored, err
}

func TestParseMiniLBLine(t *testing.T) {
	// The line from the seed reproduction, with pdlb in place of
	// `python -m sglang_router.launch_router`.
	c, ignored, err := parse(t, "--mini-lb", "--pd-disaggregation",
		"--prefill", "http://127.0.0.1:30000", "--decode", "http://127.0.0.1:30010",
		"--host", "0.0.0.0", "--port", "8000")
	if err != nil {
		t.Fatalf("cannot parse the mini_lb line: %s", err)
	}
	if len(ignored) != 0 {
		t.Fatalf("got ignored flags %q; want none", ignored)
	}
	s := c.Serve
	want := []lb.PrefillSpec{{URL: "http://127.0.0.1:30000"}}
	if !reflect.DeepEqual([]lb.PrefillSpec(s.Prefill), want) {
		t.Fatalf("got prefill %+v; want %+v", s.Prefill, want)
	}
	if !reflect.DeepEqual(s.Decode, []string{"http://127.0.0.1:30010"}) {
		t.Fatalf("got decode %q", s.Decode)
	}
	if s.Host != "0.0.0.0" || s.Port != 8000 || !s.MiniLB || !s.PDDisaggregation {
		t.Fatalf("got host %q port %d mini-lb %v pd %v", s.Host, s.Port, s.MiniLB, s.PDDisaggregation)
	}
}

func TestParseDefaults(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:30000", "--decode", "http://d:30010")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Serve
	if s.Host != "0.0.0.0" || s.Port != 30000 || s.RequestTimeoutSecs != 1800 || s.Policy != "random" {
		t.Fatalf("got host %q port %d timeout %d policy %q; want mini_lb's defaults", s.Host, s.Port, s.RequestTimeoutSecs, s.Policy)
	}
	cfg, warnings := s.config()
	if cfg.RequestTimeout != 1800*time.Second || cfg.PrefillPolicy != lb.PolicyRandom || len(warnings) != 0 {
		t.Fatalf("got %+v, warnings %q", cfg, warnings)
	}
}

func TestParsePrefillPorts(t *testing.T) {
	f := func(want []lb.PrefillSpec, args ...string) {
		t.Helper()
		c, _, err := parse(t, append(args, "--decode", "http://d:1")...)
		if err != nil {
			t.Fatalf("%q: %s", args, err)
		}
		if got := []lb.PrefillSpec(c.Serve.Prefill); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %+v; want %+v", args, got, want)
		}
	}
	f([]lb.PrefillSpec{{URL: "http://p:1", BootstrapPort: 8998}}, "--prefill", "http://p:1", "8998")
	f([]lb.PrefillSpec{{URL: "http://p:1"}}, "--prefill", "http://p:1", "none")
	f([]lb.PrefillSpec{{URL: "http://p:1", BootstrapPort: 9000}, {URL: "http://q:1"}, {URL: "http://r:1", BootstrapPort: 9001}},
		"--prefill", "http://p:1", "9000", "--prefill", "http://q:1", "--prefill", "http://r:1", "9001")
	f([]lb.PrefillSpec{{URL: "http://p:1"}}, "--prefill=http://p:1")
	// The port token may come last on the line, or before another flag.
	f([]lb.PrefillSpec{{URL: "http://p:1", BootstrapPort: 7}}, "--port", "8000", "--prefill", "http://p:1", "7")
}

func TestParseEnvironment(t *testing.T) {
	t.Setenv("PDLB_PREFILL", "http://p:1 8998,http://q:1")
	t.Setenv("PDLB_DECODE", "http://d:1")
	t.Setenv("PDLB_REQUEST_TIMEOUT_SECS", "60")
	c, _, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := []lb.PrefillSpec{{URL: "http://p:1", BootstrapPort: 8998}, {URL: "http://q:1"}}
	if got := []lb.PrefillSpec(c.Serve.Prefill); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	if c.Serve.RequestTimeoutSecs != 60 || !reflect.DeepEqual(c.Serve.Decode, []string{"http://d:1"}) {
		t.Fatalf("got timeout %d decode %q", c.Serve.RequestTimeoutSecs, c.Serve.Decode)
	}
}

func TestParseRouterFlags(t *testing.T) {
	c, ignored, err := parse(t, "--mini-lb", "--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1",
		"--policy", "cache_aware", "--health-check-interval-secs", "3600", "--dp-aware",
		"--worker-urls", "http://a:1", "http://b:1", "--cache-threshold=0.5", "--prometheus-duration-buckets", "0.1", "1",
		"--request-timeout-secs", "60", "--connect-timeout-secs", "3", "--log-level", "warning", "--port", "8000")
	if err != nil {
		t.Fatalf("router flags must be accepted: %s", err)
	}
	want := IgnoredFlags{"--dp-aware", "--worker-urls", "--prometheus-duration-buckets"}
	if !reflect.DeepEqual(ignored, want) {
		t.Fatalf("got ignored %q; want %q", ignored, want)
	}
	if c.Serve.Port != 8000 || c.Serve.RequestTimeoutSecs != 60 || c.Serve.HealthCheckIntervalSecs != 3600 {
		t.Fatalf("flags after ignored ones were lost: port %d timeout %d", c.Serve.Port, c.Serve.RequestTimeoutSecs)
	}
	cfg, warnings := c.Serve.config()
	if cfg.PrefillPolicy != lb.PolicyCacheAware || cfg.CacheAware.CacheThreshold != 0.5 || len(warnings) != 0 {
		t.Fatalf("got policy %q, threshold %v, warnings %q; want cache_aware at 0.5, with no warning", cfg.PrefillPolicy,
			cfg.CacheAware.CacheThreshold, warnings)
	}
	// bucket, the one sglang_router policy pdlb does not implement, is
	// random with a warning.
	c, _, err = parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--prefill-policy", "bucket")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, warnings := c.Serve.config(); cfg.PrefillPolicy != lb.PolicyRandom || len(warnings) != 1 || !strings.Contains(warnings[0], "bucket") {
		t.Fatalf("got policy %q, warnings %q; want random with a warning", cfg.PrefillPolicy, warnings)
	}
	if cfg.ConnectTimeout != 3*time.Second {
		t.Fatalf("got connect timeout %s; want --connect-timeout-secs' 3 s", cfg.ConnectTimeout)
	}
}

// --retry-max-retries counts every attempt, as sglang_router's
// retry_max_retries does: a line copied from a router deployment gets the
// same number of tries, not one more.
func TestRetryMaxRetriesCountsEveryAttempt(t *testing.T) {
	for flag, want := range map[string]struct {
		retries  int
		disabled bool
	}{
		"":  {2, false}, // the default, 3 attempts
		"0": {0, true},
		"1": {0, true},
		"2": {1, false},
		"5": {4, false},
	} {
		args := []string{"--prefill", "http://p:1", "--decode", "http://d:1"}
		if flag != "" {
			args = append(args, "--retry-max-retries", flag)
		}
		c, _, err := parse(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := c.Serve.config()
		if cfg.MaxRetries != want.retries || cfg.DisableRetries != want.disabled {
			t.Errorf("--retry-max-retries %q: got %d retries, disabled %v; want %d, %v", flag, cfg.MaxRetries, cfg.DisableRetries, want.retries, want.disabled)
		}
	}
}

// sglang_router's TLS and authentication flags are refused, saying what to
// do instead, unless the line is mini_lb's, which ignores them as pdlb then
// does: a `launch_router --pd-disaggregation` line lost them with a mere
// warning, leaving pdlb on plain HTTP with no authentication.
func TestParseSecurityFlagsNeedMiniLB(t *testing.T) {
	workers := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	for _, tc := range []struct {
		args     []string
		want     string // in the error without --mini-lb
		asMiniLB string // in the warning with it
	}{
		{[]string{"--tls-cert-path", "c.pem", "--tls-key-path", "k.pem"}, "--tls-cert-path, --tls-key-path: pdlb does not serve HTTPS; terminate TLS in front of it", "pdlb serves plain HTTP"},
		{[]string{"--tls-cert-path=c.pem"}, "--tls-cert-path: pdlb does not serve HTTPS", "pdlb serves plain HTTP"},
		{[]string{"--client-cert-path", "c.pem", "--client-key-path", "k.pem"}, "--client-cert-path, --client-key-path: pdlb presents no client certificate", "no client certificate"},
		{[]string{"--ca-cert-paths", "a.pem", "b.pem"}, "--ca-cert-paths: pdlb takes no CA certificate files; it verifies https workers against the system's CAs, and the SSL_CERT_FILE", "system's CAs"},
		{[]string{"--control-plane-api-keys", "k1:ci:admin:secret"}, "--control-plane-api-keys: pdlb checks no control-plane API key or JWT; use --api-key", "no key or token but --api-key's"},
		{[]string{"--jwt-issuer", "https://idp", "--jwt-audience", "pdlb", "--jwt-jwks-uri", "https://idp/keys", "--jwt-role-claim", "roles", "--jwt-role-mapping", "a=admin"},
			"--jwt-issuer, --jwt-audience, --jwt-jwks-uri, --jwt-role-claim, --jwt-role-mapping: pdlb checks no control-plane API key or JWT", "no key or token"},
		{[]string{"--control-plane-audit-enabled"}, "--control-plane-audit-enabled: pdlb keeps no audit log; --access-log", "no audit log"},
	} {
		args := append(append([]string{}, workers...), tc.args...)
		_, _, err := parse(t, append(args, "--port", "8000")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "with --mini-lb, pdlb ignores them") {
			t.Errorf("%q: got error %v; want one containing %q", tc.args, err, tc.want)
		}
		if code := cli.ExitCode(err); code != 2 {
			t.Errorf("%q: got exit status %d; want 2", tc.args, code)
		}

		var flags IgnoredFlags
		for _, a := range tc.args {
			if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(name, "--") {
				flags = append(flags, name)
			}
		}
		c, ignored, err := parse(t, append([]string{"--mini-lb"}, append(args, "--port", "8000")...)...)
		if err != nil || c.Serve.Port != 8000 || !reflect.DeepEqual(ignored, flags) {
			t.Fatalf("--mini-lb %q: got %v, port %d, ignored %q; want %q ignored", tc.args, err, c.Serve.Port, ignored, flags)
		}
		for _, f := range ignored {
			if got := ignoredWarning(f); !strings.Contains(got, "as mini_lb does: pdlb") || !strings.Contains(got, tc.asMiniLB) {
				t.Errorf("--mini-lb %s: got warning %q; want it to say %q, as mini_lb", f, got, tc.asMiniLB)
			}
		}
	}

	// All of them at once: one line each kind.
	_, _, err := parse(t, append(workers, "--jwt-issuer", "x", "--tls-key-path", "k", "--control-plane-api-keys", "--tls-cert-path", "c")...)
	if err == nil || !strings.Contains(err.Error(), "--jwt-issuer, --control-plane-api-keys: pdlb checks") ||
		!strings.Contains(err.Error(), "\n--tls-key-path, --tls-cert-path: pdlb does not serve HTTPS") {
		t.Errorf("got error %v; want a line for each kind of flag", err)
	}
	// --mini-lb from the environment counts.
	t.Setenv("PDLB_MINI_LB", "true")
	if _, _, err := parse(t, append(workers, "--tls-cert-path", "c")...); err != nil {
		t.Errorf("with PDLB_MINI_LB: got %v; want --tls-cert-path ignored", err)
	}
	// The other router flags are still ignored without --mini-lb.
	t.Setenv("PDLB_MINI_LB", "false")
	if _, ignored, err := parse(t, append(workers, "--dp-aware", "--cors-allowed-origins", "http://a")...); err != nil || len(ignored) != 2 {
		t.Errorf("got %v, ignored %q; want --dp-aware and --cors-allowed-origins ignored", err, ignored)
	} else if got := ignoredWarning("--dp-aware"); got != "ignoring an sglang_router flag that pdlb does not implement" {
		t.Errorf("--dp-aware: got warning %q", got)
	}
}

// TestParseNegativeValues reads a negative number after a flag as its
// value, as argparse does: sglang_router's scripts pass
// "--max-concurrent-requests -1" for no limit.
func TestParseNegativeValues(t *testing.T) {
	for _, arg := range [][]string{{"--max-concurrent-requests", "-1"}, {"--max-concurrent-requests=-1"}} {
		c, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode", "http://d:1", "--port", "8000"}, arg...)...)
		if err != nil {
			t.Fatalf("%q: %s", arg, err)
		}
		if cfg, _ := c.Serve.config(); cfg.MaxConcurrentRequests != 0 || c.Serve.Port != 8000 {
			t.Fatalf("%q: got a limit of %d, port %d; want none, 8000", arg, cfg.MaxConcurrentRequests, c.Serve.Port)
		}
	}
	// A router flag pdlb ignores takes its negative value with it.
	c, ignored, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--retry-jitter-factor", "-0.5", "--port", "8000")
	if err != nil || c.Serve.Port != 8000 || !reflect.DeepEqual(ignored, IgnoredFlags{"--retry-jitter-factor"}) {
		t.Fatalf("got %v, port %d, ignored %q", err, c.Serve.Port, ignored)
	}
	// A negative value where none makes sense is still refused, by name.
	if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--retry-max-retries", "-1"); err == nil ||
		!strings.Contains(err.Error(), "--retry-max-retries") {
		t.Fatalf("got %v; want an error naming --retry-max-retries", err)
	}
}

// --max-connections and --client-idle-timeout-secs reach lb.Config (issue
// 19): the budget is derived from the descriptor limit unless given, and
// below zero there is none; the idle timeout must be positive.
func TestParseConnectionFlags(t *testing.T) {
	f := func(maxConns int, idle time.Duration, args ...string) {
		t.Helper()
		c, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode", "http://d:1"}, args...)...)
		if err != nil {
			t.Fatalf("%q: %s", args, err)
		}
		if cfg, _ := c.Serve.config(); cfg.MaxConnections != maxConns || cfg.ClientIdleTimeout != idle {
			t.Fatalf("%q: got max connections %d, idle timeout %s; want %d, %s", args, cfg.MaxConnections, cfg.ClientIdleTimeout, maxConns, idle)
		}
	}
	f(0, 90*time.Second)
	f(500, 15*time.Second, "--max-connections", "500", "--client-idle-timeout-secs", "15")
	f(-1, 90*time.Second, "--max-connections", "-1")
	t.Setenv("PDLB_MAX_CONNECTIONS", "2000")
	t.Setenv("PDLB_CLIENT_IDLE_TIMEOUT_SECS", "5")
	f(2000, 5*time.Second)
	if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--client-idle-timeout-secs", "0"); err == nil ||
		!strings.Contains(err.Error(), "--client-idle-timeout-secs") {
		t.Fatalf("got %v; want an error naming --client-idle-timeout-secs", err)
	}
}

// The list flags take several values from one environment variable, as
// PDLB_PREFILL does: comma-separated.
func TestParseListsFromTheEnvironment(t *testing.T) {
	t.Setenv("PDLB_DECODE", "http://d:1,,http://e:2,")  // empty items are slips
	t.Setenv("PDLB_FALLBACK", "http://a:1, http://b:2") // spaces after commas too
	t.Setenv("PDLB_REQUEST_ID_HEADERS", "X-Trace-Id, X-Correlation-Id")
	t.Setenv("PDLB_VERSION", "1.2.3") // an image label, not --version
	c, _, err := parse(t, "--prefill", "http://p:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.Serve.config()
	if !reflect.DeepEqual(cfg.Decode, []string{"http://d:1", "http://e:2"}) ||
		!reflect.DeepEqual(cfg.Fallback, []string{"http://a:1", "http://b:2"}) ||
		!reflect.DeepEqual(cfg.RequestIDHeaders, []string{"X-Trace-Id", "X-Correlation-Id"}) {
		t.Fatalf("got decode %q, fallback %q, request-ID headers %q", cfg.Decode, cfg.Fallback, cfg.RequestIDHeaders)
	}
}

// --queue-size 0 means no queue, as in sglang_router; lb's zero is its
// default, so the flag's 0 goes on as -1.
func TestParseQueueSizeZero(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--max-concurrent-requests", "4", "--queue-size", "0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := c.Serve.config(); cfg.QueueSize >= 0 {
		t.Fatalf("got queue size %d; want a negative one, for none", cfg.QueueSize)
	}
}

// sglang_router's --api-key is pdlb's too, not an ignored router flag.
func TestParseAPIKey(t *testing.T) {
	c, ignored, err := parse(t, "--mini-lb", "--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1", "--api-key", "k1")
	if err != nil || len(ignored) != 0 {
		t.Fatalf("got %v, ignored %q", err, ignored)
	}
	if cfg, _ := c.Serve.config(); cfg.APIKey != "k1" {
		t.Fatalf("got API key %q; want k1", cfg.APIKey)
	}
}

// --admin-api-key keeps the operator routes for operators; --mini-lb,
// without it, opens them as mini_lb does, and warns that it does.
func TestParseAdminAPIKey(t *testing.T) {
	workers := []string{"--prefill", "http://p:1", "--decode", "http://d:1"}
	for _, tc := range []struct {
		args  []string
		admin string
		open  bool
		warn  bool
	}{
		{nil, "", false, false},
		{[]string{"--admin-api-key", "a1"}, "a1", false, false},
		{[]string{"--mini-lb"}, "", true, true},
		{[]string{"--mini-lb", "--admin-api-key", "a1"}, "a1", true, false},
	} {
		c, _, err := parse(t, append(append([]string{}, workers...), tc.args...)...)
		if err != nil {
			t.Fatalf("%q: %s", tc.args, err)
		}
		cfg, _ := c.Serve.config()
		warning := c.Serve.openRoutesWarning()
		if cfg.AdminAPIKey != tc.admin || cfg.OpenOperatorRoutes != tc.open || (warning != "") != tc.warn {
			t.Errorf("%q: got admin key %q, open %v, warning %q; want %q, %v, a warning %v",
				tc.args, cfg.AdminAPIKey, cfg.OpenOperatorRoutes, warning, tc.admin, tc.open, tc.warn)
		}
		if tc.warn && (!strings.Contains(warning, "open to every client") || !strings.Contains(warning, "--admin-api-key")) {
			t.Errorf("%q: got warning %q; want it to say the routes are open, and how to close them", tc.args, warning)
		}
	}
	t.Setenv("PDLB_ADMIN_API_KEY", "a2")
	c, _, err := parse(t, workers...)
	if cfg, _ := c.Serve.config(); err != nil || cfg.AdminAPIKey != "a2" {
		t.Fatalf("got %v, admin key %q; want a2 from PDLB_ADMIN_API_KEY", err, cfg.AdminAPIKey)
	}
}

// An admin listener that serves the operator routes without a key on an
// address other machines reach (--prometheus-host's default) is warned of.
func TestOpenAdminListenerIsWarnedOf(t *testing.T) {
	f := func(warn bool, args ...string) {
		t.Helper()
		c, _, err := parse(t, append([]string{"--prefill", "http://p:1", "--decode", "http://d:1"}, args...)...)
		if err != nil {
			t.Fatalf("%q: %s", args, err)
		}
		_, warnings := c.Serve.config()
		got := strings.Contains(strings.Join(warnings, "\n"), "answer without a key on the admin listener")
		if got != warn {
			t.Errorf("%q: got warnings %q; want the open admin listener's: %v", args, warnings, warn)
		}
	}
	f(false)
	f(true, "--prometheus-port", "29000")
	f(false, "--prometheus-port", "29000", "--prometheus-host", "127.0.0.1")
	f(false, "--prometheus-port", "29000", "--prometheus-host", "::1")
	f(false, "--prometheus-port", "29000", "--admin-api-key", "a1")
	f(true, "--pprof-addr", "10.0.0.1:6060")
	f(false, "--pprof-addr", "localhost:6060")
}

// sglang_router's --request-id-headers takes its names after it, as many
// as follow.
func TestParseRequestIDHeaders(t *testing.T) {
	c, ignored, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1",
		"--request-id-headers", "x-trace-id", "x-correlation-id", "--port", "8000")
	if err != nil || len(ignored) != 0 {
		t.Fatalf("got %v, ignored %q", err, ignored)
	}
	if cfg, _ := c.Serve.config(); !reflect.DeepEqual(cfg.RequestIDHeaders, []string{"x-trace-id", "x-correlation-id"}) || c.Serve.Port != 8000 {
		t.Fatalf("got %q, port %d", cfg.RequestIDHeaders, c.Serve.Port)
	}
	c, _, _ = parse(t, "--prefill", "http://p:1", "--decode", "http://d:1")
	if cfg, _ := c.Serve.config(); !reflect.DeepEqual(cfg.RequestIDHeaders, []string{"X-Request-Id"}) {
		t.Fatalf("got default %q; want X-Request-Id", cfg.RequestIDHeaders)
	}
}

func TestParseErrors(t *testing.T) {
	f := func(wantErr string, args ...string) {
		t.Helper()
		_, _, err := parse(t, args...)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%q: got error %v; want one containing %q", args, err, wantErr)
		}
	}
	f("unknown flag --no-such-flag", "--prefill", "http://p:1", "--decode", "http://d:1", "--no-such-flag")
	f("unknown policy", "--prefill", "http://p:1", "--decode", "http://d:1", "--policy", "fastest")
	f(`--port: expected a port number 1-65535, got "0"`, "--prefill", "http://p:1", "--decode", "http://d:1", "--port", "0")
	f("--max-header-size 10 is too small", "--prefill", "http://p:1", "--decode", "http://d:1", "--max-header-size", "10")
	// --max-payload-size 0 was lb's default, 64 MiB, not the "no limit" it
	// looks like.
	f("--max-payload-size must be positive", "--prefill", "http://p:1", "--decode", "http://d:1", "--max-payload-size", "0")
	f("--max-payload-size must be positive", "--prefill", "http://p:1", "--decode", "http://d:1", "--max-payload-size=-1")
	f("--max-batch-size must be positive", "--prefill", "http://p:1", "--decode", "http://d:1", "--max-batch-size", "0")
	f("--cache-threshold must be between 0 and 1", "--prefill", "http://p:1", "--decode", "http://d:1", "--cache-threshold", "1.5")
	f("cannot be negative", "--prefill", "http://p:1", "--decode", "http://d:1", "--balance-abs-threshold=-1")
	f("--max-tree-size must be positive", "--prefill", "http://p:1", "--decode", "http://d:1", "--max-tree-size", "0")
	f("--worker-load-check-interval must be positive", "--prefill", "http://p:1", "--decode", "http://d:1", "--worker-load-check-interval", "0")
	f("unknown policy", "--prefill", "http://p:1", "--decode", "http://d:1", "--decode-policy", "fastest")
}

// The body limits reach lb.Config: --max-body-memory and --max-batch-size
// with their defaults, and as given.
func TestParseBodyLimits(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := c.Serve.config(); cfg.MaxBodyMemory != 1<<30 || cfg.MaxBatchSize != 4096 || cfg.MaxRequestBodySize != 256<<20 {
		t.Fatalf("got memory %d, batch %d, payload %d; want 1 GiB, 4096, 256 MiB", cfg.MaxBodyMemory, cfg.MaxBatchSize, cfg.MaxRequestBodySize)
	}
	c, _, err = parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--max-body-memory", "3000", "--max-payload-size", "1000", "--max-batch-size", "7")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.Serve.config()
	if cfg.MaxBodyMemory != 3000 || cfg.MaxBatchSize != 7 {
		t.Fatalf("got memory %d, batch %d; want 3000, 7", cfg.MaxBodyMemory, cfg.MaxBatchSize)
	}
	// Too little for one request of the largest size: a usage error of
	// lb.New's, which Run reports as one.
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--max-body-memory 3000 is less than") {
		t.Fatalf("got %v; want the body memory refused", err)
	}
}

// A token after --prefill URL that is not a flag is its bootstrap port, and
// a bad one is refused by name, as sglang_router's "Invalid bootstrap port:
// abc. Must be a number or 'none'": "--prefill URL abc" was "unexpected
// argument abc", and "--prefill URL -1" "unknown flag -1, did you mean
// "-h"?".
func TestParseBadBootstrapPorts(t *testing.T) {
	for _, port := range []string{"abc", "-1", "-0.5", "0", "70000", "-"} {
		want := fmt.Sprintf("invalid bootstrap port %q for prefill http://p:1", port)
		for _, args := range [][]string{
			{"--prefill", "http://p:1", port, "--decode", "http://d:1"},
			{"--decode", "http://d:1", "--prefill", "http://p:1", port},
			{"--decode", "http://d:1", "--prefill=http://p:1", port},
		} {
			if _, _, err := parse(t, args...); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: got error %v; want one containing %q", args, err, want)
			}
		}
	}
	t.Setenv("PDLB_PREFILL", "http://q:1 8998, http://p:1 abc")
	if _, _, err := parse(t, "--decode", "http://d:1"); err == nil || !strings.Contains(err.Error(), `invalid bootstrap port "abc" for prefill http://p:1`) {
		t.Errorf("PDLB_PREFILL: got error %v; want one naming the prefill and its port", err)
	}
}

func TestParseSubcommandsKeepTheirFlags(t *testing.T) {
	var c root
	var out bytes.Buffer
	parser, err := newParser(&c, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"fake", "bench", "relay", "pair"} {
		// --redis-url is a router flag serve does not define: serve would drop it.
		args := []string{cmd, "--redis-url", "x"}
		if kept, ignored := stripRouterFlags(parser, args); !reflect.DeepEqual(kept, args) || ignored != nil {
			t.Fatalf("got kept %q ignored %q; want the %s arguments untouched", kept, ignored, cmd)
		}
	}
}

func TestParseDecodeOnlyFlags(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--fallback", "http://a:1",
		"--fallback", "http://b:1", "--fallback-policy", "round_robin", "--pd-min-prompt-tokens", "256", "--decode-local-prefill")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.Serve.config()
	if !reflect.DeepEqual(cfg.Fallback, []string{"http://a:1", "http://b:1"}) || cfg.FallbackPolicy != lb.PolicyRoundRobin ||
		cfg.PDMinPromptTokens != 256 || !cfg.DecodeLocalPrefill {
		t.Fatalf("got %+v", cfg)
	}
	if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--pd-min-prompt-tokens", "-1"); err == nil {
		t.Fatalf("a negative --pd-min-prompt-tokens was accepted")
	}
}

func TestGCPercentDefaultsUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	applyGCPercent()
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC the GC target is %d, want %d", got, defaultGCPercent)
	}
	t.Setenv("GOGC", "100")
	applyGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100 pdlb changed the GC target to %d", got)
	}
}

// A usage error found after parsing exits with status 2, as argparse's do,
// not 1, the status of a failure at run time.
func TestUsageErrorsExitWithStatus2(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "ftp://d:1")
	if err != nil {
		t.Fatal(err)
	}
	c.Serve.LogLevel = "error"
	if code := cli.ExitCode(c.Serve.Run(nil, func(code int) { t.Errorf("serve exited with status %d; want a usage error returned", code) }, "test")); code != 2 {
		t.Errorf("serve with an ftp decode URL: exit status %d; want 2", code)
	}
}

// A listen address that cannot be listened on anywhere is a usage error,
// refused as the command line is parsed (main exits with status 2):
// --pprof-addr 33660 used to fail once pdlb was starting, with status 1.
func TestListenAddressesAreCheckedAtParse(t *testing.T) {
	t.Parallel()
	workers := []string{"--prefill", "http://p:1", "--decode", "http://d:1"}
	f := func(wantErr string, args ...string) {
		t.Helper()
		_, _, err := parse(t, append(workers, args...)...)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: got error %v; want one containing %q", args, err, wantErr)
		}
	}
	f(`--pprof-addr "33660" is not HOST:PORT`, "--pprof-addr", "33660")
	f(`--pprof-addr "localhost" is not HOST:PORT`, "--pprof-addr", "localhost")
	f(`--pprof-addr "::1:6060" is not HOST:PORT`, "--pprof-addr", "::1:6060")
	f(`"http" is not a port from 1 to 65535`, "--pprof-addr", "127.0.0.1:http")
	f(`"70000" is not a port from 1 to 65535`, "--pprof-addr", "127.0.0.1:70000")
	f(`"0" is not a port from 1 to 65535`, "--pprof-addr", ":0")
	f(`"" is not a port from 1 to 65535`, "--pprof-addr", "127.0.0.1:")
	f(`--prometheus-host "0.0.0.0:9000" is not a host: give the port with --prometheus-port`,
		"--prometheus-host", "0.0.0.0:9000", "--prometheus-port", "29000")
	f(`--prometheus-host "[::]" is not a host`, "--prometheus-host", "[::]", "--prometheus-port", "29000")
	// Refused without --prometheus-port too: whoever wrote it meant a port.
	f(`--prometheus-host "0.0.0.0:9000" is not a host`, "--prometheus-host", "0.0.0.0:9000")
	f(`--host "0.0.0.0:8000" is not a host: give the port with --port`, "--host", "0.0.0.0:8000")

	for _, args := range [][]string{
		{"--pprof-addr", "127.0.0.1:6060"}, {"--pprof-addr", ":6060"}, {"--pprof-addr", "[::1]:6060"},
		{"--pprof-addr", "localhost:6060"}, {"--prometheus-host", "::", "--prometheus-port", "29000"},
		{"--prometheus-host", "fe80::1%eth0", "--prometheus-port", "29000"}, {"--host", "::1"},
	} {
		if _, _, err := parse(t, append(workers, args...)...); err != nil {
			t.Errorf("%q: got error %v; want none", args, err)
		}
	}
}

// --pd-min-prompt-tokens sends short prompts to the fallback pool; without
// one, they would all get a 503, which pdlb warns of at start.
func TestShortPromptsWithoutAFallbackAreWarnedOf(t *testing.T) {
	c, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--pd-min-prompt-tokens", "8")
	if err != nil {
		t.Fatal(err)
	}
	if _, warnings := c.Serve.config(); len(warnings) != 1 || !strings.Contains(warnings[0], "without --fallback") {
		t.Errorf("got warnings %q; want one about the missing fallback", warnings)
	}
	c, _, err = parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--pd-min-prompt-tokens", "8", "--decode-local-prefill")
	if err != nil {
		t.Fatal(err)
	}
	if _, warnings := c.Serve.config(); len(warnings) != 1 || !strings.Contains(warnings[0], "OpenAI routes") {
		t.Errorf("got warnings %q; want one about the OpenAI routes, which local prefill does not cover", warnings)
	}
	c, _, err = parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--pd-min-prompt-tokens", "8", "--fallback", "http://a:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, warnings := c.Serve.config(); len(warnings) != 0 {
		t.Errorf("got warnings %q; want none with a fallback", warnings)
	}
}

// sglang_router's routing flags reach lb's Config, none of them ignored.
func TestRoutingFlags(t *testing.T) {
	c, ignored, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--prefill-policy", "cache_aware",
		"--decode-policy", "manual", "--cache-threshold", "0.6", "--balance-abs-threshold", "8", "--balance-rel-threshold", "1.2",
		"--max-tree-size", "1000", "--eviction-interval-secs", "30", "--prefix-token-count", "64",
		"--max-idle-secs", "60", "--assignment-mode", "min_load", "--worker-load-check-interval", "3")
	if err != nil || len(ignored) != 0 {
		t.Fatalf("got %v, ignored %q; want the flags taken", err, ignored)
	}
	cfg, warnings := c.Serve.config()
	ca := cfg.CacheAware
	if len(warnings) != 0 || cfg.PrefillPolicy != lb.PolicyCacheAware || cfg.DecodePolicy != lb.PolicyManual ||
		ca.CacheThreshold != 0.6 || ca.BalanceAbsThreshold != 8 || ca.BalanceRelThreshold != 1.2 || ca.MaxTreeSize != 1000 ||
		ca.EvictionInterval != 30*time.Second || cfg.PrefixHashTokens != 64 || cfg.Manual.MaxIdle != time.Minute ||
		cfg.Manual.Assignment != "min_load" || cfg.LoadCheckInterval != 3*time.Second {
		t.Fatalf("got %+v, %+v, %d, %+v, %s (warnings %q)", cfg.CacheAware, cfg.Manual, cfg.PrefixHashTokens, cfg.Manual,
			cfg.LoadCheckInterval, warnings)
	}
	if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", "--assignment-mode", "nearest"); err == nil {
		t.Error("--assignment-mode nearest was taken; want a usage error")
	}
}
