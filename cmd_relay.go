package main

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"pdlb/bench/relay"
)

// relayCmd pipes TCP connections to one address with nothing on the way:
// the floor of any proxy, which make bench measures beside pdlb.
type relayCmd struct {
	Listen string `help:"Address to accept connections on." required:"" placeholder:"HOST:PORT"`
	To     string `help:"Address to pipe each connection to." required:"" placeholder:"HOST:PORT"`
}

func (c *relayCmd) Run() error {
	return runUntilSignal(c.Listen, func(ctx context.Context, ln net.Listener) error {
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		return relay.Serve(ln, c.To)
	})
}

// runUntilSignal runs serve on a listener on addr, with a context that is
// done on SIGINT or SIGTERM: the baselines' way of running.
func runUntilSignal(addr string, serve func(context.Context, net.Listener) error) error {
	ln, err := listen(addr)
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, ln)
}
