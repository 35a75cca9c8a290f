package pair

import (
	"context"
	"net"

	"pdlb/lb/cli"
)

// Command is `pdlb pair`: it serves a featureless pairing proxy, the
// reference pdlb is measured against in make bench.
type Command struct {
	Listen        string `help:"Address to serve on." required:"" placeholder:"HOST:PORT"`
	Prefill       string `help:"The prefill worker." required:"" placeholder:"HOST:PORT"`
	Decode        string `help:"The decode worker." required:"" placeholder:"HOST:PORT"`
	BootstrapPort int    `help:"The prefill's bootstrap port." default:"8998" type:"port"`
}

// Run serves until SIGINT or SIGTERM.
func (c *Command) Run() error {
	cfg := Config{Prefill: c.Prefill, Decode: c.Decode, BootstrapPort: c.BootstrapPort}
	return cli.RunUntilSignal(c.Listen, func(ctx context.Context, ln net.Listener) error {
		return Serve(ctx, ln, cfg)
	})
}
