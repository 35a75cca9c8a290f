package lb

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/bootstrap"
	"pdlb/lb/policy"
)

// A worker listed twice is a usage error naming it; pdlb used to panic on
// the clash of its metric names.
func TestValidateRefusesDuplicateWorkers(t *testing.T) {
	f := func(name string, mutate func(*Config), want string) {
		t.Helper()
		cfg := defaultConfig()
		mutate(&cfg)
		err := cfg.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: got %q; want no error", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v; want an error containing %q", name, err, want)
		}
		if want != "" {
			// New must refuse it too, rather than panic.
			if _, err := New(cfg, zerolog.Nop()); err == nil {
				t.Errorf("%s: New accepted it", name)
			}
		}
	}
	f("prefill twice", func(c *Config) { c.Prefill = append(c.Prefill, c.Prefill[0]) },
		"worker prefill-0:30000 is listed twice: --prefill http://prefill-0:30000 and --prefill http://prefill-0:30000")
	f("trailing slash", func(c *Config) { c.Decode = append(c.Decode, "http://decode-0:30010/") },
		"--decode http://decode-0:30010 and --decode http://decode-0:30010/")
	f("other scheme", func(c *Config) { c.Decode = append(c.Decode, "https://decode-0:30010") },
		"worker decode-0:30010 is listed twice")
	f("host case", func(c *Config) { c.Decode = append(c.Decode, "DECODE-0:30010") }, "is listed twice")
	f("default port", func(c *Config) { c.Fallback = []string{"http://agg", "agg:80"} },
		"--fallback http://agg and --fallback agg:80")
	f("two pools", func(c *Config) { c.Fallback = []string{"http://decode-0:30010"} },
		"--decode http://decode-0:30010 and --fallback http://decode-0:30010")
	f("IPv6 spellings", func(c *Config) { c.Decode = []string{"http://[::1]:30010", "http://[0:0:0:0:0:0:0:1]:30010"} },
		"is listed twice")
	f("IPv4-mapped", func(c *Config) { c.Decode = []string{"http://127.0.0.1:30010", "http://[::ffff:127.0.0.1]:30010"} },
		"is listed twice")
	f("distinct", func(c *Config) { c.Decode = append(c.Decode, "http://decode-0:30011", "http://decode-1:30010") }, "")
}

func TestValidateRefusesAControlCharacterInTheKey(t *testing.T) {
	cfg := defaultConfig()
	cfg.APIKey = "k\r\nX-Injected: 1"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "control character") {
		t.Fatalf("got %v; want the key refused", err)
	}
	cfg = defaultConfig()
	cfg.AdminAPIKey = "k\r\nX-Injected: 1"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "admin API key holds a control character") {
		t.Fatalf("got %v; want the admin key refused", err)
	}
}

// An admin key that is the API key would make every client an operator.
func TestValidateRefusesTheAPIKeyAsAdminKey(t *testing.T) {
	cfg := defaultConfig()
	cfg.APIKey, cfg.AdminAPIKey = "k", "k"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "the admin API key is the API key") {
		t.Fatalf("got %v; want it refused", err)
	}
	cfg.AdminAPIKey = "k2"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("got %v for two keys", err)
	}
}

// A body budget that one request of the largest size allowed cannot fit
// in (its body and a copy for each worker) would refuse it forever.
// (Issue 19's review: exactly three bodies left no room for pdlb's fields.)
func TestValidateRefusesASmallBodyMemory(t *testing.T) {
	f := func(memory int64, payload int, ok bool) {
		t.Helper()
		cfg := defaultConfig()
		cfg.MaxBodyMemory, cfg.MaxRequestBodySize = memory, payload
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("memory %d, payload %d: got %v; want ok=%v", memory, payload, err, ok)
		}
	}
	// Three bodies, two of them with pdlb's fields for the largest batch
	// and the prefill's host (rewriteSize, with a DP-rank hint).
	fields := int64(2 * bootstrap.MaxAdded("prefill-0", defaultMaxBatchSize))
	f(3000+fields, 1000, true)
	f(2999+fields, 1000, false)
	f(3*defaultMaxRequestBodySize+fields, 0, true) // the payload's default
	f(3*defaultMaxRequestBodySize+fields-1, 0, false)
	f(0, 1<<30, true) // the memory's default grows to fit
}

// cache_aware's parameters come whole or not at all: thresholds of 0 that
// a launch line sets stay 0, and none set take sglang_router's defaults.
func TestCacheAwareParametersComeWhole(t *testing.T) {
	set := Config{CacheAware: policy.CacheAwareConfig{MaxTreeSize: 100, EvictionInterval: time.Second}}
	set.setDefaults()
	if ca := set.CacheAware; ca.CacheThreshold != 0 || ca.BalanceAbsThreshold != 0 || ca.BalanceRelThreshold != 0 || ca.MaxTreeSize != 100 {
		t.Errorf("thresholds set to 0 became %+v", ca)
	}
	var unset Config
	unset.setDefaults()
	if unset.CacheAware != policy.DefaultCacheAware() {
		t.Errorf("no parameters became %+v; want the defaults %+v", unset.CacheAware, policy.DefaultCacheAware())
	}
	half := defaultConfig()
	half.CacheAware = policy.CacheAwareConfig{CacheThreshold: 0.5}
	if err := half.Validate(); err == nil || !strings.Contains(err.Error(), "tree size") {
		t.Errorf("a threshold without a tree size validated: %v", err)
	}
}

// manual's assignment mode is one policy.NewManual takes.
func TestManualAssignmentIsChecked(t *testing.T) {
	cfg := defaultConfig()
	cfg.Manual = policy.ManualConfig{Assignment: "nearest"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `unknown assignment mode "nearest"`) {
		t.Fatalf("got %v; want the unknown mode named", err)
	}
	cfg.Manual.Assignment = policy.AssignMinGroup
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
