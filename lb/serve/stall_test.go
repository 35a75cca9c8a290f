package serve

import (
	"testing"
	"time"
)

// --client-stall-timeout-secs and --max-aborts-per-second reach lb.Config,
// with their defaults, and neither takes a value that is not positive.
func TestParseStallAndAbortFlags(t *testing.T) {
	f := func(stall time.Duration, aborts int, args ...string) {
		t.Helper()
		c, _, err := parse(t, append([]string{"--prefill", "http://p:30000", "--decode", "http://d:30010"}, args...)...)
		if err != nil {
			t.Fatalf("%q: %s", args, err)
		}
		cfg, _ := c.Serve.config()
		if cfg.ClientStallTimeout != stall || cfg.MaxAbortsPerSecond != aborts {
			t.Fatalf("%q: got a stall timeout of %s and %d aborts a second; want %s and %d",
				args, cfg.ClientStallTimeout, cfg.MaxAbortsPerSecond, stall, aborts)
		}
	}
	f(10*time.Second, 100)
	f(3*time.Second, 7, "--client-stall-timeout-secs", "3", "--max-aborts-per-second", "7")
	for _, flag := range []string{"--client-stall-timeout-secs", "--max-aborts-per-second"} {
		if _, _, err := parse(t, "--prefill", "http://p:1", "--decode", "http://d:1", flag, "0"); err == nil {
			t.Fatalf("%s 0 was accepted", flag)
		}
	}
}
