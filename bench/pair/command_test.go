package pair

import (
	"testing"

	"pdlb/lb/cli"
)

// parse parses args as `pdlb pair ARGS`, with the number readers main gives
// every command.
func parse(t *testing.T, args ...string) (*Command, error) {
	t.Helper()
	var c Command
	return &c, cli.ParseCommand(&c, args...)
}

func TestParsePair(t *testing.T) {
	c, err := parse(t, "--listen", "127.0.0.1:1", "--prefill", "127.0.0.1:2", "--decode", "127.0.0.1:3")
	if err != nil {
		t.Fatalf("cannot parse the pair line: %s", err)
	}
	if got := *c; got.Listen != "127.0.0.1:1" || got.Prefill != "127.0.0.1:2" || got.Decode != "127.0.0.1:3" || got.BootstrapPort != 8998 {
		t.Errorf("pair got %+v", got)
	}
	if _, err := parse(t, "--listen", "127.0.0.1:1", "--prefill", "127.0.0.1:2"); err == nil {
		t.Error("pair without --decode parsed; want an error")
	}
}
