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
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	return relay.Serve(ln, c.To)
}
