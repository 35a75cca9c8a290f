package main

import (
	"context"
	"net"

	"pdlb/bench/relay"

	"pdlb/internal/cli"
)

// relayCmd pipes TCP connections to one address with nothing on the way:
// the floor of any proxy, which make bench measures beside pdlb.
type relayCmd struct {
	Listen string `help:"Address to accept connections on." required:"" placeholder:"HOST:PORT"`
	To     string `help:"Address to pipe each connection to." required:"" placeholder:"HOST:PORT"`
}

func (c *relayCmd) Run() error {
	return cli.RunUntilSignal(c.Listen, func(ctx context.Context, ln net.Listener) error {
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		return relay.Serve(ln, c.To)
	})
}
