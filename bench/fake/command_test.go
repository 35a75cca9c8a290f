package fake

import (
	"strings"
	"testing"

	"pdlb/lb/cli"
)

// parse parses args as `pdlb fake ARGS`, with the number readers main gives
// every command.
func parse(t *testing.T, args ...string) (*Command, error) {
	t.Helper()
	var c Command
	return &c, cli.ParseCommand(&c, args...)
}

func TestParseErrors(t *testing.T) {
	f := func(wantErr string, args ...string) {
		t.Helper()
		_, err := parse(t, args...)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%q: got error %v; want one containing %q", args, err, wantErr)
		}
	}
	f(`--bootstrap-port: expected a port number 1-65535, got "99999"`, "--decode", "127.0.0.1:1", "--bootstrap-port", "99999")
	f("outside 1-65535", "--prefill", "127.0.0.1:1,127.0.0.1:2", "--bootstrap-port", "65535")
}
