package relay

import (
	"testing"

	"pdlb/lb/cli"
)

// parse parses args as `pdlb relay ARGS`, with the number readers main gives
// every command.
func parse(t *testing.T, args ...string) (*Command, error) {
	t.Helper()
	var c Command
	return &c, cli.ParseCommand(&c, args...)
}

func TestParseRelay(t *testing.T) {
	c, err := parse(t, "--listen", "127.0.0.1:1", "--to", "127.0.0.1:2")
	if err != nil {
		t.Fatalf("cannot parse the relay line: %s", err)
	}
	if c.Listen != "127.0.0.1:1" || len(c.To) != 1 || c.To[0] != "127.0.0.1:2" {
		t.Errorf("relay got --listen %q --to %q", c.Listen, c.To)
	}
	if c, err := parse(t, "--listen", "127.0.0.1:1", "--to", "127.0.0.1:2,127.0.0.1:3"); err != nil || len(c.To) != 2 {
		t.Errorf("relay to two upstreams: %v, %v", c.To, err)
	}
	if _, err := parse(t, "--listen", "127.0.0.1:1"); err == nil {
		t.Error("relay without --to parsed; want an error")
	}
}
