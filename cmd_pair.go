package main

import (
	"context"
	"net"

	"pdlb/bench/pair"

	"pdlb/internal/cli"
)

// pairCmd serves a featureless pairing proxy: the reference pdlb is
// measured against in make bench.
type pairCmd struct {
	Listen        string `help:"Address to serve on." required:"" placeholder:"HOST:PORT"`
	Prefill       string `help:"The prefill worker." required:"" placeholder:"HOST:PORT"`
	Decode        string `help:"The decode worker." required:"" placeholder:"HOST:PORT"`
	BootstrapPort int    `help:"The prefill's bootstrap port." default:"8998" type:"port"`
}

func (c *pairCmd) Run() error {
	cfg := pair.Config{Prefill: c.Prefill, Decode: c.Decode, BootstrapPort: c.BootstrapPort}
	return cli.RunUntilSignal(c.Listen, func(ctx context.Context, ln net.Listener) error {
		return pair.Serve(ctx, ln, cfg)
	})
}
