package relay

import (
	"context"
	"net"

	"pdlb/lb/cli"
)

// Command is `pdlb relay`: it pipes TCP connections to an address with
// nothing on the way, the floor of any proxy, which make bench measures
// beside pdlb; or to several in turn, as an L4 balancer.
type Command struct {
	Listen string   `help:"Address to accept connections on." required:"" placeholder:"HOST:PORT"`
	To     []string `help:"Address to pipe each connection to; repeat (or list with commas) to take several in turn, a connection each." required:"" placeholder:"HOST:PORT"`
}

// Run relays until SIGINT or SIGTERM.
func (c *Command) Run() error {
	return cli.RunUntilSignal(c.Listen, func(ctx context.Context, ln net.Listener) error {
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		return Serve(ln, c.To...)
	})
}
